"""The pure core must import and run with torch, ray, vllm and nemo_rl unavailable."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
