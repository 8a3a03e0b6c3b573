"""The pair data of a classifier run and its held-out split."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from darling_nemo.judges.calibrated import grouped_folds
from darling_nemo.judges.pairdata import LabelledPair, group_key, load_pairs, split_pairs
from darling_nemo.schema import ClassifierTrainConfig, ConfigError


def load_split(
    cfg: ClassifierTrainConfig, path: Path
) -> tuple[list[LabelledPair], list[LabelledPair], list[LabelledPair]]:
    """(all pairs, train, held-out) of the pair file at `path` (the config's `data`); a
    missing or malformed file is a ConfigError naming the config key and the file, raised
    before anything is written."""
    try:
        pairs = load_pairs(path, cfg.text_a, cfg.text_b, cfg.label, cfg.split_key)
    except ValueError as err:
        raise ConfigError(f"data: {err}") from None
    if cfg.cv_folds is None:
        train, heldout = split_pairs(pairs, cfg.heldout_fraction, cfg.split_seed)
        return pairs, train, heldout
    # the folds of `python -m darling_nemo.bench.calibrated_judge --seed split_seed`
    folds = grouped_folds([group_key(p) for p in pairs], cfg.cv_folds, cfg.split_seed)
    train = [p for p, fold in zip(pairs, folds, strict=True) if fold != cfg.cv_fold]
    heldout = [p for p, fold in zip(pairs, folds, strict=True) if fold == cfg.cv_fold]
    return pairs, train, heldout


def write_split(
    out_dir: Path,
    cfg: ClassifierTrainConfig,
    pairs: list[LabelledPair],
    train: list[LabelledPair],
    heldout: list[LabelledPair],
) -> None:
    """`split.json` (the held-out lines of the data file) and a line on the split."""
    (out_dir / "split.json").write_text(
        json.dumps({"data": cfg.data, "heldout_lines": [p.line for p in heldout]})
    )
    print(
        f"data: {len(pairs)} pairs -> train {len(train)} / held-out {len(heldout)} "
        f"(split by {cfg.split_key!r}, seed {cfg.split_seed}"
        + (f", fold {cfg.cv_fold} of {cfg.cv_folds}" if cfg.cv_folds else "")
        + "); similar share "
        f"{np.mean([p.label for p in train]):.3f} / {np.mean([p.label for p in heldout]):.3f}"
    )
