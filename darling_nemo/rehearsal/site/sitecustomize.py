"""Imported by Python at start-up when this folder is on PYTHONPATH (the CPU rehearsal puts
it there for the driver and every Ray worker): swaps NeMo-RL's GPU worker classes for the
CPU stand-ins. Does nothing outside a rehearsal.

swap.py itself (Ray, numpy, the config loader: 1-5 s of CPU per process on 2 shared cores)
is imported only by a process that imports a module it patches: of a rehearsal run's ~28
Python processes (Ray's daemons, its idle and queue workers, the worker initializers) most
never do."""

import os

if os.environ.get("DARLING_REHEARSAL_DIR"):
    import sys

    from darling_nemo.rehearsal import PATCHED_MODULES

    class _SwapOnFirstUse:
        """Finds nothing itself; on the first import of a patched module, installs swap.py
        and hands that import to swap.py's own finder."""

        installed = False

        def find_spec(self, name, path, target=None):
            if self.installed or name not in PATCHED_MODULES:
                return None
            self.installed = True
            from darling_nemo.rehearsal.swap import install, patched_spec

            install()
            return patched_spec(name, path, target)

    sys.meta_path.insert(0, _SwapOnFirstUse())
