"""Prefix-complete judging: the generation workers report, per sample, the moment the words the
judge reads are settled, and the driver's judge stream takes the response then
(`darling.prefix_judging`; docs/judge-cost.md).

NeMo-RL v0.4.0's async vLLM worker (`VllmAsyncGenerationWorker.generate_async`) iterates
vLLM's cumulative outputs of each request and keeps only the last. Three pieces carry the
earlier ones to the driver:

- the driver tags each sample's generation call: `tag_generation` wraps the
  `policy_generation` NeMo-RL's per-sample rollout receives, so the one-sample batch it
  sends to a worker carries `PREFIX_TAG` = [[inbox name, batch row, words]];
- the worker, `PrefixReportingVllmAsyncWorker` (NeMo-RL's async worker, subclassed; NeMo-RL
  builds it from its class path, which the adapter maps to this one), wraps its engine's
  `generate` so that a `SettledReporter` looks at the cumulative text every `CHECK_EVERY`
  outputs and, once `judge_stream.settled_words` fixes the words, sends them to the inbox;
- `PrefixInbox`, a named Ray actor of the driver's, holds what the workers sent;
  `InboxPoller` (a driver thread) hands it to `JudgeStream.add_settled`.

A verdict judged on settled words is used only if the final response gives the judge the
same input (`judge_stream.usable_verdicts`), so nothing the worker reports can change a
class; a report that comes late or never only costs time.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from darling_nemo.judge_stream import settled_words

PREFIX_TAG = "darling_prefix"
NEMO_RL_WORKER = "nemo_rl.models.generation.vllm.vllm_worker_async.VllmAsyncGenerationWorker"
WORKER = "darling_nemo.nemo_rl.prefix_worker.PrefixReportingVllmAsyncWorker"
CHECK_EVERY = 16  # vLLM outputs (about tokens) between two looks at a sample's text
POLL_S = 0.05  # how often the driver empties the inbox


class SettledReporter:
    """One sample, in the worker: sends its settled words to the inbox once."""

    def __init__(self, tag: list[Any], send: Callable[[str, int, str], None]) -> None:
        self.inbox, self.row, self.words = str(tag[0]), int(tag[1]), int(tag[2])
        self.send = send
        self.outputs = 0
        self.sent = False

    def see(self, text: str, now: bool = False) -> None:
        """The sample's text so far (cumulative); looked at every CHECK_EVERY calls, or
        `now` (the request's last output)."""
        if self.sent:
            return
        self.outputs += 1
        if now or self.outputs % CHECK_EVERY == 0:
            settled = settled_words(text, self.words)
            if settled is not None:
                self.send(self.inbox, self.row, settled)
                self.sent = True


def send_to_inbox(inbox: str, row: int, settled: str) -> None:
    """The worker's side of the channel: fire and forget to the driver's named actor."""
    inbox_actor(inbox).put.remote(row, settled)


_INBOXES: dict[str, Any] = {}


def inbox_actor(name: str) -> Any:
    import ray

    if name not in _INBOXES:
        _INBOXES[name] = ray.get_actor(name)
    return _INBOXES[name]


CURRENT: contextvars.ContextVar[SettledReporter | None] = contextvars.ContextVar(
    "darling_prefix_reporter", default=None
)


class ReportingEngine:
    """vLLM's engine as the worker holds it, with `generate` watched by the current sample's
    reporter (set by the worker's `generate_async`); everything else is the engine's."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        outputs = self._engine.generate(*args, **kwargs)
        reporter = CURRENT.get()
        return outputs if reporter is None else _watched(outputs, reporter)


async def _watched(outputs: AsyncIterator[Any], reporter: SettledReporter) -> AsyncIterator[Any]:
    async for output in outputs:
        completion = output.outputs[0]
        reporter.see(completion.text, now=output.finished)
        yield output


@contextlib.contextmanager
def reporting(tag: list[Any] | None) -> Iterator[None]:
    """The worker's `generate_async` runs inside this: its engine calls report for `tag`."""
    token = CURRENT.set(SettledReporter(tag, send_to_inbox) if tag else None)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):  # reset from another context
            CURRENT.reset(token)


# The worker methods the subclass overrides, with their parameters in NeMo-RL v0.4.0 (the
# subclass is imported in the worker's environment, so touch_points.py cannot check them).
WORKER_METHODS = {
    "_create_engine": ("self", "llm_kwargs"),
    "generate_async": ("self", "data", "greedy"),
}


def check_worker(base: type) -> None:
    """Raise naming every method of NeMo-RL's async worker that is not v0.4.0's."""
    problems = []
    for name, expected in WORKER_METHODS.items():
        method = getattr(base, name, None)
        # Ray's actor class adds `_ray_trace_ctx` to every method: not NeMo-RL's
        found = (
            tuple(p for p in inspect.signature(method).parameters if p != "_ray_trace_ctx")
            if method
            else None
        )
        if found != expected:
            problems.append(f"{base.__name__}.{name}: {found}, expected {expected}")
    if problems:
        raise RuntimeError(
            "darling.prefix_judging subclasses NeMo-RL v0.4.0's async vLLM worker, which "
            "differs here: " + "; ".join(problems) + " (set darling.prefix_judging=false)"
        )


def _worker_class() -> Any:
    """NeMo-RL v0.4.0's async vLLM worker with its engine watched (imported in the worker's
    own environment, where vLLM is)."""
    import ray
    from nemo_rl.models.generation.vllm.vllm_worker_async import VllmAsyncGenerationWorker

    base = VllmAsyncGenerationWorker.__ray_metadata__.modified_class
    check_worker(base)

    class PrefixReportingVllmAsyncWorker(base):  # type: ignore[misc, valid-type]
        def _create_engine(self, llm_kwargs: dict[str, Any]) -> None:
            super()._create_engine(llm_kwargs)
            self.llm = ReportingEngine(self.llm)

        async def generate_async(self, data: Any, greedy: bool = False) -> Any:
            tags = data.get(PREFIX_TAG) if hasattr(data, "get") else None
            with reporting(tags[0] if tags else None):
                async for item in super().generate_async(data, greedy):
                    yield item

    PrefixReportingVllmAsyncWorker.__qualname__ = "PrefixReportingVllmAsyncWorker"
    return ray.remote(PrefixReportingVllmAsyncWorker)


def __getattr__(name: str) -> Any:
    # Built on first use, inside the vLLM worker's environment (RayWorkerBuilder imports it
    # by its class path there); the driver never imports vLLM for it.
    if name == "PrefixReportingVllmAsyncWorker":
        worker = _worker_class()
        globals()[name] = worker
        return worker
    raise AttributeError(name)


# ------------------------------------------------------------------------ the driver's side


class PrefixInbox:
    """What the workers sent, until the driver takes it (a named Ray actor)."""

    def __init__(self) -> None:
        self.items: list[tuple[int, str]] = []

    def put(self, row: int, settled: str) -> None:
        self.items.append((row, settled))

    def take(self) -> list[tuple[int, str]]:
        items, self.items = self.items, []
        return items

    def pending(self) -> int:
        return len(self.items)


class InboxPoller:
    """Driver thread: empties the inbox into `deliver(row, settled)` every POLL_S."""

    def __init__(self, name: str, deliver: Callable[[int, str], None]) -> None:
        import ray

        self.name = name
        self.inbox = ray.remote(PrefixInbox).options(name=name, num_cpus=0).remote()
        self.deliver = deliver
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="darling-prefixes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import ray

        while not self._stop.is_set():
            for row, settled in ray.get(self.inbox.take.remote()):
                self.deliver(row, settled)
            time.sleep(POLL_S)

    def close(self) -> None:
        import ray

        self._stop.set()
        self._thread.join()
        ray.kill(self.inbox)


class TaggedGeneration:
    """`policy_generation` for one sample: its generation calls carry the sample's tag."""

    def __init__(self, generation: Any, tag: list[Any]) -> None:
        self._generation = generation
        self._tag = tag

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generation, name)

    def generate_async(self, data: Any, greedy: bool = False) -> Any:
        data[PREFIX_TAG] = [list(self._tag) for _ in range(len(data["input_lengths"]))]
        return self._generation.generate_async(data, greedy=greedy)
