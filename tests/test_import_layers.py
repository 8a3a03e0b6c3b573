"""The package's layers: a module may import its own layer and the layers below, never above.

Read from the source with `ast` (nothing is imported), so a lazy import inside a function
counts too: the production path of a real run (nemo_rl/, trl/, judges/) never reaches the
CPU rehearsal, a benchmark or a command-line entry point.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

# Lowest first. A top-level module or sub-package of darling_nemo is named by its first part.
LAYERS: list[set[str]] = [
    {  # the pure core (methods: DARLING's fusions and its rivals, one module each, beside it)
        "__init__",
        "core",
        "methods",
        "validation_messages",
        "schema_keys",
        "jsonl",
        "resources",
        "resume",
        "interrupt",  # a command's quiet Ctrl-C at start-up (standard library only)
        "manifest",  # a checkpoint's files, sizes and hashes (standard library only)
        "console",  # run-time lines below any progress bar (standard library only)
        "ports",  # local ports, waiting for a child to serve (standard library only)
        "registries",  # the verbs every registry shares (standard library only)
    },
    # the configs and the core's pure companions; run_folder: an output folder's lock and
    # a full disk's one line (their errors are ConfigErrors); user_rewards: a user's reward
    # functions, checked and called in a worker pool, for both engines
    {"schema", "metrics", "judge_stream", "run_folder", "user_rewards"},
    {"config"},  # YAML loading and the one error path of every command
    {"plan"},  # the memory plan and the architecture table (read by judges' cost model)
    {"judges", "mini"},
    {"tasks"},  # what a run trains on, below both engines: an engine asks the registry
    {  # the engines and the single-purpose commands
        "nemo_rl",
        "trl",
        "classifier_training",
        "classify_server",
        "serve_classifiers",
        "data_prep",
        "score",
    },
    {"export", "evals"},  # after training: checkpoints to HF, evaluations
    {"rehearsal"},  # NeMo-RL's loop on CPU with stand-ins: never imported by a real run
    {"smoke"},  # the job on GPUs for 3 steps, checked by the rehearsal's phase checker
    {"bench", "recipe"},  # benchmarks and the recipes' entry point
]
LAYER_OF = {name: level for level, names in enumerate(LAYERS) for name in names}
PACKAGE = REPO / "darling_nemo"


def part_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imports(path: Path) -> set[str]:
    """The darling_nemo modules `path` imports, at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {name for name in names if name.startswith("darling_nemo.")}
    return found


def test_every_part_of_the_package_has_a_layer():
    parts = {path.stem if path.is_file() else path.name for path in PACKAGE.iterdir()}
    parts = {p for p in parts if not p.startswith(("_", ".")) and p != "py"}
    parts = {p for p in parts if (PACKAGE / p).is_dir() or (PACKAGE / f"{p}.py").is_file()}
    assert parts - set(LAYER_OF) == set(), "give every new module a layer in LAYERS"


def test_no_module_imports_a_higher_layer():
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        here = LAYER_OF[part_of(module)]
        for target in sorted(imports(path)):
            if LAYER_OF[part_of(target)] > here:
                upward.append(f"{path.relative_to(REPO)} imports {target}")
    assert upward == []


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    """The test above can fail: a judge module importing the rehearsal is caught, also when
    the import hides inside a function."""
    source = "def f():\n    from darling_nemo.rehearsal.pacing import paced_judge\n"
    (tmp_path / "x.py").write_text(source)
    assert imports(tmp_path / "x.py") == {"darling_nemo.rehearsal.pacing"}
    assert LAYER_OF[part_of("darling_nemo.rehearsal.pacing")] > LAYER_OF["judges"]


def test_neither_engine_imports_the_other():
    """nemo_rl/ and trl/ share one layer and meet only below it (tasks/, the core): an
    import between them would tie a cluster run to TRL or a laptop run to NeMo-RL's adapter."""
    crossing = []
    for here, there in (("nemo_rl", "trl"), ("trl", "nemo_rl")):
        for path in sorted((PACKAGE / here).rglob("*.py")):
            crossing += [
                f"{path.relative_to(REPO)} imports {target}"
                for target in sorted(imports(path))
                if part_of(target) == there
            ]
    assert crossing == []
