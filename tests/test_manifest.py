"""A checkpoint's manifest (darling_nemo/manifest.py), on folders made by hand: each kind of
damage is named in words, an earlier version's folder (no manifest) is checked by the
structure of its files, and a damaged folder is moved aside, never deleted."""

from __future__ import annotations

import json

import pytest
from helpers import checkpoint_by_hand

from darling_nemo.manifest import MANIFEST, check, damaged_words, sha256_of


def test_the_manifest_records_every_file_with_its_size_and_sha256(tmp_path):
    folder = checkpoint_by_hand(tmp_path / "checkpoint-3")
    recorded = json.loads((folder / MANIFEST).read_text())["files"]
    assert sorted(recorded) == [
        "1_Pooling/config.json",
        "model.safetensors",
        "optimizer.pt",
        "trainer_state.json",
    ]
    state = folder / "trainer_state.json"
    assert recorded["trainer_state.json"] == {"size": 18, "sha256": sha256_of(state)}
    assert check(folder).problem is None and not check(folder).legacy


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda f: (f / "optimizer.pt").unlink(), "optimizer.pt is missing"),
        (
            lambda f: (f / "trainer_state.json").write_text('{"global_step": 2}'),  # same size
            "trainer_state.json: contents differ from the manifest's sha256",
        ),
        (
            lambda f: (f / "1_Pooling" / "config.json").write_text("{ }"),
            "1_Pooling/config.json: 3 bytes, manifest says 2",
        ),
        (lambda f: (f / MANIFEST).write_text('{"files": '), "manifest.json is unreadable"),
    ],
    ids=["missing", "hash", "size", "manifest"],
)
def test_each_kind_of_damage_is_named(tmp_path, damage, expected):
    folder = checkpoint_by_hand(tmp_path / "checkpoint-3")
    damage(folder)
    assert check(folder).problem == expected


def test_a_truncated_safetensors_file_is_named_with_both_sizes(tmp_path):
    folder = checkpoint_by_hand(tmp_path / "checkpoint-3")
    size = (folder / "model.safetensors").stat().st_size
    with (folder / "model.safetensors").open("r+b") as f:
        f.truncate(size - 5)
    assert check(folder).problem == f"model.safetensors: {size - 5} bytes, manifest says {size}"


def test_an_earlier_versions_checkpoint_is_checked_by_its_files_structure(tmp_path):
    intact = checkpoint_by_hand(tmp_path / "intact", manifest=False)
    assert check(intact).problem is None and check(intact).legacy

    cut = checkpoint_by_hand(tmp_path / "cut", manifest=False)
    weights = cut / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(size - 4)
    assert check(cut).problem == (
        f"model.safetensors: {size - 4} bytes, its safetensors header says {size}"
    )
    with weights.open("r+b") as f:
        f.truncate(20)  # shorter than its own header
    assert "model.safetensors: 20 bytes, its header alone says" in check(cut).problem

    torn = checkpoint_by_hand(tmp_path / "torn", manifest=False)
    optimizer = torn / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:-30])
    assert check(torn).problem.startswith("optimizer.pt: ")
    assert "a torch file cut short" in check(torn).problem

    half_json = checkpoint_by_hand(tmp_path / "json", manifest=False)
    (half_json / "trainer_state.json").write_text('{"global_step": ')
    assert check(half_json).problem == "trainer_state.json: not valid JSON (cut short?)"


def test_a_damaged_folder_is_moved_aside_never_deleted(tmp_path):
    folder = checkpoint_by_hand(tmp_path / "checkpoint-3")
    (folder / "optimizer.pt").unlink()
    words = damaged_words(folder, check(folder).problem)
    (aside,) = tmp_path.iterdir()
    assert not folder.exists()
    # Not a `checkpoint-*` name: neither a resume nor save_total_limit rotation takes it.
    assert aside.name.startswith("damaged-checkpoint-3-")
    assert (aside / "model.safetensors").is_file()
    assert (
        words == f"checkpoint-3 is damaged (optimizer.pt is missing); moved aside to {aside.name}"
    )
