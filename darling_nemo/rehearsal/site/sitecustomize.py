"""Imported by Python at start-up when this folder is on PYTHONPATH (the CPU rehearsal puts
it there for the driver and every Ray worker): swaps NeMo-RL's GPU worker classes for the
CPU stand-ins. Does nothing outside a rehearsal."""

import os

if os.environ.get("DARLING_REHEARSAL_DIR"):
    from darling_nemo.rehearsal.swap import install

    install()
