"""The repository's shape, read from its files (nothing is imported): test files with unique
basenames, modules and functions within the size limits, and docs/layout.md agreeing with the
layers in tests/test_import_layers.py and with the files on disk."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

from helpers import REPO
from test_import_layers import LAYER_OF, PACKAGE

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
LAYOUT = REPO / "docs" / "layout.md"
# Packages whose layout entry names every one of their modules: nemo_rl/ is where the NeMo-RL
# boundary is drawn, so a module added there is one the map must show.
FULLY_LISTED = {"nemo_rl"}
NEMO_RL_IMPORTERS = "Outside `nemo_rl/`, these modules import NeMo-RL:"
EVERY_MODULE = "\n## Every module\n"


def shared_basenames(root: Path) -> dict[str, list[str]]:
    """Test files under `root` whose file name another test file has too. pytest imports a
    test file by its basename (tests/ holds no __init__.py), so in one session the second one
    stops collection with "import file mismatch"."""
    where = defaultdict(list)
    for path in sorted(root.rglob("test_*.py")):
        where[path.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_test_files_share_a_basename():
    assert shared_basenames(REPO / "tests") == {}


def test_a_shared_basename_is_found(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_x.py").write_text("")
    (tmp_path / "test_y.py").write_text("")
    assert shared_basenames(tmp_path) == {"test_x.py": ["a/test_x.py", "b/test_x.py"]}


def oversized(path: Path, root: Path) -> list[str]:
    """`path`'s size offences: the module past MAX_MODULE_LINES, each function (methods and
    nested functions included, named by their enclosing classes and functions) past
    MAX_FUNCTION_LINES, decorators not counted."""
    source = path.read_text()
    name = path.relative_to(root)
    found = []
    lines = len(source.splitlines())
    if lines > MAX_MODULE_LINES:
        found.append(f"{name} ({lines} lines)")

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                qualname = prefix + child.name
                if not isinstance(child, ast.ClassDef):
                    length = child.end_lineno - child.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        found.append(f"{name}:{qualname} ({length} lines)")
                visit(child, qualname + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(source), "")
    return found


def test_modules_and_functions_stay_within_their_sizes():
    offenders = []
    for folder in ("darling_nemo", "recipes"):
        for path in sorted((REPO / folder).rglob("*.py")):
            offenders += oversized(path, REPO)
    assert offenders == [], (
        f"over {MAX_MODULE_LINES} lines a module or {MAX_FUNCTION_LINES} a function: "
        + ", ".join(offenders)
    )


def test_the_size_check_names_its_offenders(tmp_path):
    body = "".join(f"    x{k} = {k}\n" for k in range(MAX_FUNCTION_LINES))
    source = f"class A:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    source += "def ok():\n    return 1\n" + "\n" * MAX_MODULE_LINES
    (tmp_path / "big.py").write_text(source)
    assert oversized(tmp_path / "big.py", tmp_path) == [
        f"big.py ({len(source.splitlines())} lines)",
        f"big.py:A.m ({MAX_FUNCTION_LINES + 1} lines)",
    ]


def layout_entries(text: str) -> dict[str, tuple[str, str]]:
    """docs/layout.md's darling_nemo/ tree: each entry's name (a module without `.py`, a
    package without `/`) -> (`.py` or `/`, its description, continuation lines included)."""
    tree = text.split("```", 2)[1]
    block = tree.split("\ndarling_nemo/\n", 1)[1]
    entries: dict[str, tuple[str, str]] = {}
    name = None
    for line in block.splitlines():
        if line and not line.startswith(" "):
            break  # the next top-level folder (recipes/)
        entry = re.match(r"  ([A-Za-z_][\w]*)(\.py|/) ", line)
        if entry:
            name = entry.group(1)
            entries[name] = (entry.group(2), line[entry.end() :])
        elif name is not None:
            kind, words = entries[name]
            entries[name] = (kind, words + " " + line.strip())
    return entries


def modules_named(words: str, package: str) -> set[str]:
    """The modules of `package` a description names: `x.py` or `package/x.py` (a path into
    another folder, such as recipes/x.py, is not one of them)."""
    return set(re.findall(rf"(?:(?<![\w/])|(?<=\b{package}/))(\w+)\.py\b", words))


def imports_nemo_rl(path: Path) -> bool:
    """Whether `path` imports NeMo-RL itself (not darling_nemo.nemo_rl) anywhere in its code."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        if any(name.split(".")[0] == "nemo_rl" for name in names):
            return True
    return False


def layout_problems(text: str, package: Path) -> list[str]:
    """What docs/layout.md says that the layers or the disk contradict, one line each."""
    entries = layout_entries(text)
    problems = [
        f"docs/layout.md lacks darling_nemo/{part}"
        for part in sorted(set(LAYER_OF) - {"__init__"} - set(entries))
    ]
    for name, (kind, words) in sorted(entries.items()):
        where = package / (name + ".py" if kind == ".py" else name)
        if not (where.is_file() if kind == ".py" else where.is_dir()):
            problems.append(f"docs/layout.md names darling_nemo/{name}{kind}, not on disk")
            continue
        if name not in LAYER_OF:
            problems.append(f"darling_nemo/{name}{kind} has no layer in LAYERS")
        if kind == "/":
            on_disk = {p.stem for p in where.glob("*.py") if not p.name.startswith("_")}
            named = modules_named(words, name)
            problems += [
                f"docs/layout.md names {name}/{m}.py, not on disk" for m in named - on_disk
            ]
            if name in FULLY_LISTED:
                problems += [f"docs/layout.md lacks {name}/{m}.py" for m in on_disk - named]
    # The NeMo-RL boundary: the paragraph after the tree names each module outside nemo_rl/
    # that imports NeMo-RL, as `package/module.py`.
    if NEMO_RL_IMPORTERS not in text:
        return sorted([*problems, f"docs/layout.md lacks the paragraph {NEMO_RL_IMPORTERS!r}"])
    paragraph = text.split(NEMO_RL_IMPORTERS, 1)[1].split("\n\n", 1)[0]
    stated = set(re.findall(r"`(\w+/\w+\.py)`", paragraph))
    found = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.parent.name != "nemo_rl" and imports_nemo_rl(path)
    }
    problems += [
        f"darling_nemo/{m} imports nemo_rl; docs/layout.md does not say so" for m in found - stated
    ]
    problems += [f"docs/layout.md says {m} imports nemo_rl; it does not" for m in stated - found]
    return sorted(problems)


def test_the_layout_map_matches_the_layers_and_the_disk():
    assert layout_problems(LAYOUT.read_text(), PACKAGE) == []


def test_the_layout_check_sees_drift():
    """A part left out, a module named that is gone, a nemo_rl/ module left out, and a
    rehearsal module dropped from the NeMo-RL list are each named."""
    text = LAYOUT.read_text()
    drifted = (
        text.replace("  core.py ", "  gone.py ")
        .replace("prefix_worker.py", "prefix_worker")
        .replace("`rehearsal/swap.py`", "swap")
        .replace("transform.py,", "transform.py, ghost.py,")
    )
    assert layout_problems(drifted, PACKAGE) == [
        "darling_nemo/rehearsal/swap.py imports nemo_rl; docs/layout.md does not say so",
        "docs/layout.md lacks darling_nemo/core",
        "docs/layout.md lacks nemo_rl/prefix_worker.py",
        "docs/layout.md names darling_nemo/gone.py, not on disk",
        "docs/layout.md names nemo_rl/ghost.py, not on disk",
    ]


def module_list_problems(text: str, repo: Path) -> list[str]:
    """What docs/layout.md's "Every module" list gets wrong against the disk: a module of
    darling_nemo/ or recipes/ without its line, a line for a module that is gone, a line
    without a description."""
    if EVERY_MODULE not in text:
        return ["docs/layout.md lacks the section 'Every module'"]
    listed = {}
    for line in text.split(EVERY_MODULE, 1)[1].split("\n## ", 1)[0].splitlines():
        entry = re.match(r"- `([\w/]+\.py)`: *(.*)", line)
        if entry:
            listed[entry.group(1)] = entry.group(2).strip()
    on_disk = {
        str(path.relative_to(repo))
        for folder in ("darling_nemo", "recipes")
        for path in (repo / folder).rglob("*.py")
    }
    return sorted(
        [f"docs/layout.md lacks {m}" for m in on_disk - set(listed)]
        + [f"docs/layout.md names {m}, not on disk" for m in set(listed) - on_disk]
        + [f"docs/layout.md says nothing of {m}" for m, words in listed.items() if not words]
    )


def test_every_module_has_its_line_in_the_layout():
    assert module_list_problems(LAYOUT.read_text(), REPO) == []


def test_the_module_list_check_sees_drift():
    text = LAYOUT.read_text()
    drifted = re.sub(r"(- `recipes/eval_math.py`:).*", r"\1", text)
    drifted = drifted.replace("- `darling_nemo/core.py`:", "- `darling_nemo/gone.py`:")
    drifted = drifted.replace("- `darling_nemo/tasks/rows.py`:", "- rows:")
    assert module_list_problems(drifted, REPO) == [
        "docs/layout.md lacks darling_nemo/core.py",
        "docs/layout.md lacks darling_nemo/tasks/rows.py",
        "docs/layout.md names darling_nemo/gone.py, not on disk",
        "docs/layout.md says nothing of recipes/eval_math.py",
    ]


def classes_named_twice(package: Path) -> dict[str, list[str]]:
    """Module-level class names that more than one module of `package` defines (one class
    per concept name: a reader who meets `Task` or `ContractError` knows which it is)."""
    where = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                where[node.name].append(str(path.relative_to(package)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_no_two_modules_define_a_class_of_the_same_name():
    assert classes_named_twice(PACKAGE) == {}


def test_a_class_named_twice_is_found(tmp_path):
    (tmp_path / "a.py").write_text("class Task:\n    pass\n")
    (tmp_path / "b.py").write_text("class Task:\n    pass\n\n\nclass Other:\n    pass\n")
    assert classes_named_twice(tmp_path) == {"Task": ["a.py", "b.py"]}
