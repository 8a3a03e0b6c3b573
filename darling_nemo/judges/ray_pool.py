"""Ray actor pool judge: the cross-encoder on the training job's own Ray cluster.

`num_actors` actors each load `classifier` (on `num_gpus_per_actor` GPUs when > 0, so a
cluster job can give the classifier its own GPUs instead of separate vLLM servers). A judge
call is cut into tasks of `pairs_per_task` pairs; each task goes to the actor with the fewest
tasks queued (at most two per actor, so an actor never idles between tasks). A task whose
actor died or is restarting is resent to another actor, up to `max_attempts` times, and the
actor rests 1, 2, 4, ... s while Ray restarts it; an error raised by the classifier itself
is not retried.

The judge joins the running Ray cluster (`ray.init()` if none is initialised, which reads
RAY_ADDRESS or starts a local one).
"""

from __future__ import annotations

import os
import sys
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from darling_nemo.judges import JudgeError
from darling_nemo.schema import CrossEncoderJudgeConfig, RayPoolJudgeConfig

TASKS_QUEUED_PER_ACTOR = 2
REST_BASE_S = 1.0  # an actor that failed rests 1, 2, 4, ... s (Ray is restarting it)
REST_MAX_S = 30.0


class RayPoolJudgeError(JudgeError):
    """The actor pool could not judge a call's pairs."""


class ClassifierActor:
    """Holds one CrossEncoderJudge (made a Ray actor by RayPoolJudge)."""

    def __init__(self, classifier: dict[str, Any]) -> None:
        from darling_nemo.judges.cross_encoder import CrossEncoderJudge

        self.judge = CrossEncoderJudge(CrossEncoderJudgeConfig.model_validate(classifier))

    def ready(self) -> str:
        return str(self.judge.classifier.device)

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        return self.judge(pairs)


class RayPoolJudge:
    """PairJudge over a pool of Ray actors holding the classifier."""

    def __init__(self, cfg: RayPoolJudgeConfig) -> None:
        if "ray" not in sys.modules:
            # Under `uv run`, Ray >= 2.43 would start workers with `uv run` inside a copy
            # of the working directory (a fresh environment without this package). The
            # actors need the interpreter this process runs; set it to 1 to keep Ray's way.
            os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        import ray

        self.cfg = cfg
        if not ray.is_initialized():
            # A local Ray started here serves no dashboard: it would listen on a port with no
            # authentication (ignored when joining a running cluster, whose owner decides).
            ray.init(ignore_reinit_error=True, log_to_driver=False, include_dashboard=False)
        actor = ray.remote(ClassifierActor).options(
            num_gpus=cfg.num_gpus_per_actor,
            num_cpus=cfg.num_cpus_per_actor,
            max_restarts=cfg.max_attempts,
        )
        classifier = cfg.classifier.model_dump(mode="json")
        self.actors = [actor.remote(classifier) for _ in range(cfg.num_actors)]
        try:
            self.devices = ray.get([a.ready.remote() for a in self.actors])
        except ray.exceptions.RayError as err:
            self.close()
            raise RayPoolJudgeError(
                f"ray_pool: the classifier actors failed to start ({cfg.classifier.model!r}): {err}"
            ) from err
        self.stats = {"tasks": 0, "resent_tasks": 0}
        self._failures = [0] * len(self.actors)  # consecutive failures per actor
        self._resting_until = [0.0] * len(self.actors)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        import ray

        if not pairs:
            return []
        size = self.cfg.pairs_per_task
        spans = [(s, min(s + size, len(pairs))) for s in range(0, len(pairs), size)]
        waiting = deque(range(len(spans)))
        attempts = [0] * len(spans)
        queued = [0] * len(self.actors)
        in_flight: dict[Any, tuple[int, int]] = {}  # object ref -> (span, actor)
        out: list[float] = [0.0] * len(pairs)
        deadline = time.monotonic() + self.cfg.deadline_s
        while waiting or in_flight:
            now = time.monotonic()
            if now > deadline:
                raise RayPoolJudgeError(
                    f"ray_pool: the deadline of {self.cfg.deadline_s:g}s passed with "
                    f"{len(waiting) + len(in_flight)} task(s) unfinished"
                )
            while waiting:
                a = self._pick_actor(queued, now)
                if a is None:
                    break
                k = waiting.popleft()
                start, stop = spans[k]
                ref = self.actors[a].score.remote(list(pairs[start:stop]))
                in_flight[ref] = (k, a)
                queued[a] += 1
                self.stats["tasks"] += 1
            if not in_flight:  # every actor is resting: wait for the first to come back
                time.sleep(max(min(self._resting_until) - time.monotonic(), 0.0) + 0.01)
                continue
            done, _ = ray.wait(list(in_flight), num_returns=1, timeout=REST_BASE_S)
            for ref in done:
                k, a = in_flight.pop(ref)
                queued[a] -= 1
                start, stop = spans[k]
                try:
                    out[start:stop] = ray.get(ref)
                    self._failures[a] = 0
                except ray.exceptions.RayActorError as err:  # died or restarting
                    attempts[k] += 1
                    self._failures[a] += 1
                    rest = min(REST_BASE_S * 2 ** (self._failures[a] - 1), REST_MAX_S)
                    self._resting_until[a] = time.monotonic() + rest
                    if attempts[k] >= self.cfg.max_attempts:
                        raise RayPoolJudgeError(
                            f"ray_pool: a task failed {attempts[k]} times; last error: {err}"
                        ) from err
                    self.stats["resent_tasks"] += 1
                    waiting.appendleft(k)
                except ray.exceptions.RayTaskError as err:
                    raise RayPoolJudgeError(f"ray_pool: the classifier failed: {err}") from err
        return out

    def _pick_actor(self, queued: list[int], now: float) -> int | None:
        """The least-queued actor that is not resting and has room, else None."""
        ready = [
            a
            for a in range(len(self.actors))
            if self._resting_until[a] <= now and queued[a] < TASKS_QUEUED_PER_ACTOR
        ]
        return min(ready, key=queued.__getitem__) if ready else None

    def close(self) -> None:
        """Stop the actors (their GPUs return to the cluster)."""
        import ray

        for a in self.actors:
            ray.kill(a, no_restart=True)
        self.actors = []
