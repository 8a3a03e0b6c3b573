"""The rehearsal's secrets phase: no secret's value in Ray's state, the run's files or logs.

Which secrets: every variable of the rehearsal's environment whose name says it holds one
(`auth.is_secret_name`: WANDB_API_KEY, HF_TOKEN, the judge's DARLING_JUDGE_TOKEN, which the
rehearsal always sets, ...), values of 8 characters or more. Where they are looked for,
while the private Ray still runs: its GCS job and actor tables, as stored (every runtime_env
a job or actor was given, which Ray's state API and dashboard list and anyone reaching the
head's port can read); and every byte of every file under the rehearsal's folder (its
runs' logs and checkpoints, NeMo-RL's logs, the classifier server's log, Ray's own session
logs). Rehearsal-only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

from darling_nemo.judges.auth import is_secret_name

MIN_SECRET_CHARS = 8  # shorter values ("1", "true") would be found everywhere


def secret_values(environ: Mapping[str, str]) -> dict[str, bytes]:
    return {
        name: value.encode()
        for name, value in environ.items()
        if is_secret_name(name) and len(value) >= MIN_SECRET_CHARS
    }


def ray_tables(address: str) -> Iterator[tuple[str, bytes]]:
    """(what, serialized record) of each job and actor in the GCS at `address`."""
    import ray
    from ray._private.state import state

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        accessor = state.global_state_accessor
        for record in accessor.get_job_table(
            skip_submission_job_info_field=False, skip_is_running_tasks_field=True
        ):
            yield "Ray's job table", record
        for record in accessor.get_actor_table(None, None):
            yield "Ray's actor table", record
    finally:
        ray.shutdown()


def files_under(folder: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            try:
                yield str(path), path.read_bytes()
            except OSError:  # a socket or a file Ray removed meanwhile
                continue


def check_no_secrets(environ: Mapping[str, str], ray_address: str, folder: Path) -> str:
    """What was checked, or 'FOUND: where' the first secret's value is (never the value)."""
    secrets = secret_values(environ)
    records = 0
    for where, blob in [*ray_tables(ray_address), *files_under(folder)]:
        records += 1
        for name, value in secrets.items():
            if value in blob:
                return f"FOUND: the value of {name} is in {where}"
    names = ", ".join(sorted(secrets)) or "(none set)"
    return (
        f"no value of {names} in Ray's job and actor tables or the files under {folder} "
        f"({records} records and files)"
    )
