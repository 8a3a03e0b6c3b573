"""The rehearsal's secrets phase: no secret's value in Ray's state, the run's files or logs.

Which secrets: every variable of the rehearsal's environment whose name says it holds one
(`auth.is_secret_name`: WANDB_API_KEY, HF_TOKEN, the judge's DARLING_JUDGE_TOKEN, which the
rehearsal always sets, ...) with a value of 8 characters or more, and the secrets the
rehearsal plants under names no deny-list recognises (`plant_secrets`: a proxy URL with a
password, a database URL, a short password, an ordinary-named token), which only an
allow-list keeps out of Ray (nemo_rl/ray_env.py). Each is looked for raw, URL-encoded and
base64-encoded (at every byte alignment). Where, while the private Ray still runs: every
table its GCS serves without the dashboard (jobs, actors, task events, workers, placement
groups, nodes; every runtime_env a job, actor or task was given is there, and anyone
reaching the head's port can read them), its internal KV store (every known namespace);
and every byte of every file under the rehearsal's folder (its runs' logs and checkpoints,
NeMo-RL's logs, the classifier server's log, Ray's own session logs). Rehearsal-only.
"""

from __future__ import annotations

import base64
import secrets
import string
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from urllib.parse import quote, quote_plus

from darling_nemo.judges.auth import is_secret_name

MIN_SECRET_CHARS = 8  # shorter values ("1", "true") of a real environment would be found everywhere
# what planted secrets are made of: "!" and "~" make the URL-encoded form differ from the raw
_ALPHABET = string.ascii_letters + string.digits + "!~"


@dataclass(frozen=True)
class Planted:
    """A secret the rehearsal puts in its environment: `value` under `name`, of which
    `secret` (the whole value, or a URL's password) must never reach Ray or a file."""

    name: str
    value: str
    secret: str


def _random(chars: int) -> str:
    # a fixed prefix keeps the value from being all letters a log could hold by chance
    return "Q~" + "".join(secrets.choice(_ALPHABET) for _ in range(chars - 2))


def plant_secrets() -> list[Planted]:
    """Fresh secrets under names that do not look secret (issue 45's attack)."""
    proxy_pw, db_pw, short, token = _random(20), _random(20), _random(7), _random(32)
    return [
        Planted("HTTPS_PROXY", f"http://rehearsal:{proxy_pw}@proxy.invalid:3128", proxy_pw),
        Planted("DATABASE_URL", f"postgresql://app:{db_pw}@db.invalid:5432/darling", db_pw),
        Planted("MYSQL_PWD", short, short),  # under 8 characters: looked for all the same
        Planted("MYTOKEN", token, token),
    ]


def secret_values(
    environ: Mapping[str, str], planted: list[Planted] | tuple[Planted, ...] = ()
) -> dict[str, str]:
    """{variable name: the secret to look for} of `environ` and the planted ones."""
    found = {
        name: value
        for name, value in environ.items()
        if is_secret_name(name) and len(value) >= MIN_SECRET_CHARS
    }
    return found | {p.name: p.secret for p in planted}


def _base64_forms(raw: bytes) -> set[bytes]:
    """The characters of `raw`'s base64 (standard and URL-safe) that its bytes alone decide,
    for each of the 3 byte alignments it can have inside a longer encoded string."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(bytes(offset) + raw).rstrip(b"=")
        start_bit, end_bit = 8 * offset, 8 * (offset + len(raw))
        first = -(-start_bit // 6)  # the first character that starts inside `raw`
        last = end_bit // 6  # one past the last that ends inside it
        chunk = encoded[first:last]
        forms |= {chunk, chunk.replace(b"+", b"-").replace(b"/", b"_")}
    return forms


def encodings(secret: str) -> dict[bytes, str]:
    """How a secret can appear ({bytes: which form}): raw, URL-encoded, base64-encoded."""
    raw = secret.encode()
    forms = dict.fromkeys(_base64_forms(raw), "base64-encoded")
    forms |= dict.fromkeys(
        [quote(secret, safe="").encode(), quote_plus(secret).encode()], "URL-encoded"
    )
    return forms | {raw: "raw"}


def ray_tables(address: str) -> Iterator[tuple[str, bytes]]:
    """(what, serialized record) of every table and internal-KV entry the GCS at `address`
    serves without the dashboard (Ray 2.46: its state API needs the dashboard, off here)."""
    import ray
    from ray._private import ray_constants
    from ray._private.state import state

    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        accessor = state.global_state_accessor
        tables = {
            "job table": lambda: accessor.get_job_table(
                skip_submission_job_info_field=False, skip_is_running_tasks_field=True
            ),
            "actor table": lambda: accessor.get_actor_table(None, None),
            "task events": accessor.get_task_events,
            "worker table": accessor.get_worker_table,
            "placement group table": accessor.get_placement_group_table,
            "node table": accessor.get_node_table,
        }
        for what, read in tables.items():
            for record in read():
                yield f"Ray's {what}", record
        yield from _internal_kv(ray_constants)
    finally:
        ray.shutdown()


def _internal_kv(ray_constants: object) -> Iterator[tuple[str, bytes]]:
    """Every key and value of every namespace Ray names (KV_NAMESPACE_*, and the default)."""
    from ray.experimental import internal_kv

    namespaces = {None} | {
        getattr(ray_constants, name) for name in dir(ray_constants) if "KV_NAMESPACE" in name
    }
    for namespace in namespaces:
        for key in internal_kv._internal_kv_list(b"", namespace=namespace):
            value = internal_kv._internal_kv_get(key, namespace=namespace) or b""
            yield f"Ray's internal KV ({namespace!r})", key + b"\n" + value


def files_under(folder: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            try:
                yield str(path), path.read_bytes()
            except OSError:  # a socket or a file Ray removed meanwhile
                continue


def find_secrets(
    secrets_by_name: Mapping[str, str], records: Iterator[tuple[str, bytes]]
) -> tuple[str | None, int]:
    """('the value of NAME (how) is in WHERE' for the first secret found, else None; how
    many records were read). Never the value itself."""
    needles = [
        (name, form, how)
        for name, secret in secrets_by_name.items()
        for form, how in encodings(secret).items()
    ]
    count = 0
    for where, blob in records:
        count += 1
        for name, form, how in needles:
            if form in blob:
                return f"the value of {name} ({how}) is in {where}", count
    return None, count


def check_no_secrets(
    environ: Mapping[str, str],
    ray_address: str,
    folder: Path,
    planted: list[Planted] | tuple[Planted, ...] = (),
) -> str:
    """What was checked, or 'FOUND: where' the first secret's value is (never the value)."""
    wanted = secret_values(environ, planted)
    # Ray's records read whole while it runs (its connection closed after), the files lazily
    records = chain(list(ray_tables(ray_address)), files_under(folder))
    found, count = find_secrets(wanted, records)
    if found:
        return f"FOUND: {found}"
    names = ", ".join(sorted(wanted)) or "(none set)"
    return (
        f"no value of {names} (raw, URL- or base64-encoded) in Ray's tables (jobs, actors, "
        f"task events, workers, placement groups, nodes, internal KV) or the files under "
        f"{folder} ({count} records and files)"
    )
