"""The pure core must import and run with torch, ray, vllm and nemo_rl unavailable."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

from helpers import REPO

FORBIDDEN = ("torch", "ray", "vllm", "nemo_rl", "transformers", "trl")


def test_core_imports_without_ml_stacks():
    code = textwrap.dedent(
        f"""
        import importlib.abc, sys

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {FORBIDDEN!r}:
                    raise ImportError("blocked for this test: " + name)

        sys.meta_path.insert(0, Block())
        import darling_nemo.core, darling_nemo.schema, darling_nemo.config, darling_nemo.metrics
        from darling_nemo.core import darling_batch
        from darling_nemo.schema import validate_darling
        settings = validate_darling({{}}).settings()
        out = darling_batch(["4", "4", "four"], [1, 1, 1], [0, 0, 0], None, settings)
        leaked = sorted(m for m in sys.modules if m.split(".")[0] in {FORBIDDEN!r})
        assert not leaked, leaked
        print(list(out.num_classes))
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[2]"


def test_the_methods_import_only_numpy_and_the_standard_library():
    # The diversity methods sit beside the core (tests/test_import_layers.py): importing them,
    # every method and fusion registered, loads nothing but numpy, the standard library and
    # the package itself.
    code = textwrap.dedent(
        """
        import sys
        before = set(sys.modules)
        import darling_nemo.methods
        loaded = {m.split(".")[0] for m in set(sys.modules) - before}
        others = loaded - set(sys.stdlib_module_names) - {"numpy", "darling_nemo"}
        print(sorted(others), darling_nemo.methods.method_names())
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    names = "'darling', 'pass_at_k', 'outcome', 'unlikeliness', 'pkpo', 'dqo'"
    assert result.stdout.strip() == f"[] ({names})"
    # ... and none of the package but itself: the core asks the methods, never the reverse.
    for path in sorted((REPO / "darling_nemo" / "methods").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("darling_nemo"):
                assert node.module.startswith("darling_nemo.methods"), (path.name, node.module)
