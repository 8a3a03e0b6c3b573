"""Fixtures several test modules share; plain helpers are in helpers.py."""

from __future__ import annotations

import runpy
import string
import sys
from pathlib import Path

import pytest
import work_queue
from helpers import REPO
from hypothesis import HealthCheck, settings

# One Hypothesis profile for the whole suite, loaded before any test module is imported (so a
# test's own @settings(...) inherits it): the same fixed examples on every run (derandomize, no
# example database), no per-example deadline and no too_slow health check, because a shared
# 2-core CI machine can take seconds for a draw that takes milliseconds when it is idle. What a
# property test checks does not change; only when Hypothesis gives up on slowness does.
settings.register_profile(
    "darling",
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile("darling")


@pytest.fixture(autouse=True)
def no_job_token(monkeypatch):
    """No judge token unless a test sets one, and none left behind: the one-node launcher
    puts its token in os.environ for the driver's judge, and a client holding a token asks
    every server (open ones too) to prove it holds it (judges/auth.py)."""
    monkeypatch.delenv("DARLING_JUDGE_TOKEN", raising=False)
    monkeypatch.delenv("DARLING_JUDGE_TOKEN_FILE", raising=False)


@pytest.fixture
def offline(monkeypatch):
    """No Hugging Face hub: every model a test loads is a local folder."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.fixture
def one_torch_thread():
    """Tiny models: one thread is fastest, and far faster when other processes share the CPU."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """(tiny random Llama, tiny reward model) folders, built once per test module."""
    from darling_nemo.evals.tiny import build_tiny_models

    return build_tiny_models(tmp_path_factory.mktemp("tiny"))


@pytest.fixture
def run_here(monkeypatch, capsys, offline, one_torch_thread):
    """`run_here("eval_math.py", *args)`: the recipe in this interpreter (one torch thread,
    no second torch import), from the repository root, as `__main__`; returns its stdout.
    A recipe ends with `sys.exit(main())`: exit code 0 is its normal end, any other code
    is raised to the test."""
    monkeypatch.chdir(REPO)

    def run(script: str, *args: str) -> str:
        monkeypatch.setattr(sys, "argv", [script, *args])
        try:
            runpy.run_path(str(REPO / "recipes" / script), run_name="__main__")
        except SystemExit as end:
            if end.code not in (0, None):
                raise
        return capsys.readouterr().out

    return run


@pytest.fixture(scope="module")
def char_tokenizer_dir(tmp_path_factory) -> str:
    """A real character-level fast tokenizer (`char_tokenizer` over string.printable, no
    hub) with a chat template, saved where `from_pretrained` and NeMo-RL load it."""
    from darling_nemo.trl.policy import char_tokenizer

    tok = char_tokenizer(tuple(string.printable))
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    path = tmp_path_factory.mktemp("char_tokenizer")
    tok.save_pretrained(path)
    return str(path)


# The fast tier (`uv run --group dev pytest -m fast`, docs/tests.md): the pure core's and the
# repository's own tests, less any marked slow; under 3 minutes on 2 cores.
FAST_TIER = (
    "core/",
    "test_repository.py",
    "test_import_layers.py",
    "test_lazy_imports.py",
)
TESTS = Path(__file__).resolve().parent


def mark_fast_tier(items: list[pytest.Item]) -> None:
    for item in items:
        where = Path(item.fspath).resolve().relative_to(TESTS).as_posix()
        if where.startswith(FAST_TIER) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


# CI's NeMo-RL part in two sessions that share its tests (tests/work_queue.py); inert unless
# .ci/run sets DARLING_TEST_QUEUE.
WORK_QUEUE = work_queue.queue_from_environment()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_fast_tier(items)
    if WORK_QUEUE is not None:
        work_queue.order(items)


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if WORK_QUEUE is None:
        return None
    return work_queue.run_if_claimed(WORK_QUEUE, item, nextitem)
