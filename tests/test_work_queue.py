"""CI's two NeMo-RL sessions share one list of tests through tests/work_queue.py: each unit
is claimed by exactly one session, whichever asks first, even when both ask at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from work_queue import WorkQueue

TESTS = Path(__file__).resolve().parent

CLAIM_ALL = """
import sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from work_queue import WorkQueue
queue = WorkQueue(Path(sys.argv[2]))
print(sum(queue.claim(f"unit-{i}") for i in range(int(sys.argv[3]))))
"""


def test_a_unit_is_claimed_once_whoever_asks_and_a_claimer_keeps_its_own(tmp_path):
    first, second = WorkQueue(tmp_path), WorkQueue(tmp_path)
    assert first.claim("tests/a.py") and not second.claim("tests/a.py")
    assert first.claim("tests/a.py")  # its own claim stays its own
    assert second.claim("tests/b.py") and not first.claim("tests/b.py")


def test_two_processes_racing_over_the_same_units_split_them(tmp_path):
    units = 400
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", CLAIM_ALL, str(TESTS), str(tmp_path), str(units)],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    won = [int(racer.communicate(timeout=120)[0]) for racer in racers]
    assert sum(won) == units, won  # every unit once: none twice, none lost
    assert len(list(tmp_path.iterdir())) == units
