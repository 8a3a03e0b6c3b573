"""Two pytest sessions sharing one list of tests: CI's NeMo-RL part on both cores (.ci/run).

CI runs the CPU suite beside the NeMo-RL part; the CPU suite ends first, and its core would
then sit idle. So .ci/run starts a second NeMo-RL session when the CPU suite ends, over the
same tests, and the two split them as they go: before running a unit (a test file, or one
test of a file in SPLIT_BY_TEST), a session claims it by creating a marker file in the folder
both share (DARLING_TEST_QUEUE; O_EXCL, so exactly one wins); a unit the other session
claimed is left out of this session's report, neither passed nor skipped. The first session
takes units from the front, the second (DARLING_TEST_QUEUE_FROM_END=1) from the end, so they
meet where the work runs out, whatever the machine's speed. Without DARLING_TEST_QUEUE a
session runs everything, as usual.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from _pytest.runner import runtestprotocol

QUEUE_ENV = "DARLING_TEST_QUEUE"
FROM_END_ENV = "DARLING_TEST_QUEUE_FROM_END"
# Files whose tests are long and independent (no module-scoped fixtures of their own): each
# test is a unit, so the two sessions can share the file.
SPLIT_BY_TEST = ("nemo_rl_engine/test_rehearsal.py",)


def unit_of(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    return item.nodeid if path.endswith(SPLIT_BY_TEST) else path


class WorkQueue:
    """The units this session claimed in `folder`, a folder another session shares."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.mine: set[str] = set()

    def claim(self, unit: str) -> bool:
        if unit in self.mine:
            return True
        marker = self.folder / hashlib.sha256(unit.encode()).hexdigest()
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(f"{os.getpid()} {unit}\n")
        self.mine.add(unit)
        return True


def queue_from_environment() -> WorkQueue | None:
    folder = os.environ.get(QUEUE_ENV)
    return WorkQueue(Path(folder)) if folder else None


def order(items: list[pytest.Item]) -> None:
    """From the end: the units in reverse order, each unit's tests in their own order."""
    if os.environ.get(FROM_END_ENV) != "1":
        return
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit_of(item), []).append(item)
    items[:] = [item for unit in reversed(units) for item in units[unit]]


def run_if_claimed(queue: WorkQueue, item: pytest.Item, nextitem: pytest.Item | None) -> bool:
    """Runs `item` if this session holds its unit; True either way (the item is handled)."""
    unit = unit_of(item)
    if not queue.claim(unit):
        return True
    # The next item is this session's only if it is in the same unit; otherwise tear down
    # everything after this test, as after a session's last test.
    same_unit = nextitem is not None and unit_of(nextitem) == unit
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    runtestprotocol(item, nextitem=nextitem if same_unit else None, log=True)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
