"""Running a contract's checks in a child process, with their verdicts cached.

The Megatron worker and vLLM contracts import large GPU libraries and replace parts of them
(docs/contracts.md); a child process keeps all of that out of the rehearsal's own process.
Each child checks a list of jobs and prints one `CONTRACT <index> <verdict>` line per job.
A verdict depends only on the job, the library sources and the contract's own code, so it is
cached under the environment: the rehearsals after the first reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

MARK = "CONTRACT"


class ContractError(Exception):
    """One line naming the key path and the value."""


def _cache_file(kind: str, job: dict[str, Any], paths: list[str], code: Sequence[Path]) -> Path:
    # this module's code too: the child's loop and verdict shapes live here
    hashes = [hashlib.sha256(file.read_bytes()).hexdigest() for file in [*code, Path(__file__)]]
    key = json.dumps([job, paths, hashes], sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return Path(sys.prefix) / "contract-cache" / f"{kind}-{digest}.txt"


def checked(
    kind: str,
    module: str,
    code: Sequence[Path],
    jobs: list[dict[str, Any]],
    paths: list[str],
    timeout_s: int,
) -> list[str]:
    """Each job's verdict: cached (keyed by the job, `paths` and the files of `code`, the
    contract's own code), or from one run of `python -m module JOBS.json` with `paths` first
    on its PYTHONPATH. Raises ContractError when the child itself breaks."""
    verdicts = []
    for job in jobs:
        cached = _cache_file(kind, job, paths, code)
        verdicts.append(cached.read_text() if cached.exists() else None)
    todo = [i for i, v in enumerate(verdicts) if v is None]
    if not todo:
        return [v or "" for v in verdicts]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths + inherited)}
    with tempfile.TemporaryDirectory(prefix="darling-contract-") as tmp:
        jobs_file = Path(tmp) / "jobs.json"
        jobs_file.write_text(json.dumps([jobs[i] for i in todo]))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", module, str(jobs_file)],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout_s,
            )
        except subprocess.TimeoutExpired:
            raise ContractError(f"the {kind} contract ran past {timeout_s} s") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK + " ")]
    if len(lines) != len(todo):
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ContractError(f"the {kind} contract itself failed (exit {proc.returncode}): {tail}")
    for i, line in zip(todo, lines, strict=True):
        verdicts[i] = line.split(" ", 2)[2]
        cached = _cache_file(kind, jobs[i], paths, code)
        cached.parent.mkdir(parents=True, exist_ok=True)
        # Whole or absent: CI's two NeMo-RL sessions (tests/work_queue.py) share this cache.
        partial = cached.with_name(f"{cached.name}.{os.getpid()}.partial")
        partial.write_text(verdicts[i])
        partial.replace(cached)
    return [v or "" for v in verdicts]


def report(index: int, verdict: str) -> None:
    """The child's line for job `index`."""
    print(f"{MARK} {index} {verdict}", flush=True)


def phase_line(verdict: str) -> str:
    """A job's verdict as the rehearsal's phase prints it; a 'FAIL ...' verdict raises
    ContractError with the line that names the key."""
    if verdict.startswith("FAIL "):
        raise ContractError(verdict.removeprefix("FAIL "))
    return verdict


def phase(
    cfg: dict[str, Any],
    skipped: str | None,
    sources: Callable[[], tuple[Any, str]],
    check_many: Callable[[list[dict[str, Any]]], list[str]],
) -> str:
    """A contract's phase as the rehearsal prints it: 'PASS (...)' or 'SKIPPED (why)' (why:
    `skipped`, or the library sources `sources` did not find); raises ContractError naming
    the key on a failure."""
    if skipped is not None:
        return f"SKIPPED ({skipped})"
    found, why = sources()
    if found is None:
        return f"SKIPPED ({why})"
    (verdict,) = check_many([cfg])
    return phase_line(verdict)


# ------------------------------------------------------------------------ the child's side


def check_jobs(argv: list[str], prefix: str, check: Callable[[dict[str, Any], Path], str]) -> int:
    """The child's loop: each job of the file `argv[0]` names checked in a folder of its own
    under one temporary folder, and its verdict reported."""
    jobs = json.loads(Path(argv[0]).read_text())
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for index, one in enumerate(jobs):
            report(index, check(one, Path(tmp) / str(index)))
    return 0


def model_folder(workdir: Path, hf_config: dict[str, Any]) -> Path:
    """A model folder holding `hf_config` as its config.json and nothing else (no weights)."""
    folder = workdir / "model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(hf_config))
    return folder


def stopped_at(
    call: Callable[[], object],
    stop: type[BaseException],
    name_the_key: Callable[[BaseException], str],
    where: str,
) -> str | None:
    """None where `call` reached the stand-in at `where`, which raises `stop`: everything
    before it passed. Else the FAIL verdict: the refusal named by its key, or the worker
    returning early."""
    try:
        call()
    except stop:
        return None
    except Exception as err:  # any refusal of the configuration is the verdict
        return "FAIL " + name_the_key(err)
    return f"FAIL the worker returned without reaching {where} (changed NeMo-RL?)"
