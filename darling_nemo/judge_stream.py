"""Judge pairs while the rollout still runs (`darling.judge_during_generation`).

A group's pairs can be judged as soon as both responses exist, long before the last
response of the step is done. `JudgeStream` takes each response as its rollout finishes
(`add`, from any thread), and a background thread sends waves of pairs among the finished
responses of each group, exactly as `core.partition_groups` would (lexical rules first,
never a pair whose responses are already joined, pairs oriented by batch row as the
synchronous path sends them). `close` stops it after the call in flight and returns every
verdict: the synchronous partition takes them as `known` and judges only what is left. The
classes are those of the synchronous path for any deterministic judge (partition_groups'
argument); only how many pairs were judged, and when, differ.

Pure: threads and the core; the NeMo-RL adapter feeds it (nemo_rl/adapter.py).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from darling_nemo.core import PairJudge, UnionFind, judge_and_join, lexical_decision, next_wave

StreamedVerdicts = dict[tuple[int, int], tuple[str, str, float]]
"""(row a, row b), a < b -> (response a, response b, P(similar)) as judged."""

_CLOSE = object()


@dataclass
class _Group:
    rows: list[int] = field(default_factory=list)  # batch row of each member, arrival order
    texts: list[str] = field(default_factory=list)
    forest: UnionFind = field(default_factory=lambda: UnionFind(0))


class JudgeStream:
    """One rollout's worth of streamed judging: `open`, `add` per finished response, `close`."""

    def __init__(self, judge: PairJudge, threshold: float) -> None:
        self.judge = judge
        self.threshold = threshold
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self._keys: dict[Hashable, int] = {}
        self._groups: list[_Group] = []
        self._undecided: list[list[tuple[int, int]]] = []
        self._judged: list[int] = []
        self.verdicts: StreamedVerdicts = {}
        self.error: BaseException | None = None

    @property
    def is_open(self) -> bool:
        return self._thread is not None

    def open(self) -> None:
        """Start taking responses for a new rollout (what a previous one left is dropped)."""
        self.close()
        self._reset()
        self._thread = threading.Thread(target=self._run, name="darling-stream", daemon=True)
        self._thread.start()

    def add(self, row: int, group: Hashable, text: str) -> None:
        """A finished response: its batch row, its group key (the prompt), its text."""
        if self._thread is not None:
            self._queue.put((row, group, text))

    def close(self) -> StreamedVerdicts:
        """Stop after the judge call in flight; the verdicts so far (empty if never opened).
        A judge error inside the stream only ends the stream: the synchronous partition
        judges those pairs again and meets the error (or the judge's fallback) itself."""
        if self._thread is None:
            return {}
        self._queue.put(_CLOSE)
        self._thread.join()
        self._thread = None
        return self.verdicts

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            closing = item is _CLOSE
            while not closing:
                self._add(*item)  # type: ignore[misc]
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                closing = item is _CLOSE
            if closing:
                return
            if self.error is None:
                self._judge_waves()

    def _add(self, row: int, key: Hashable, text: str) -> None:
        g = self._keys.setdefault(key, len(self._groups))
        if g == len(self._groups):
            self._groups.append(_Group())
            self._undecided.append([])
            self._judged.append(0)
        group = self._groups[g]
        new = group.forest.add()
        group.rows.append(row)
        group.texts.append(text)
        for old in range(new):
            a, b = (old, new) if group.rows[old] < row else (new, old)
            decision = lexical_decision(group.texts[a], group.texts[b])
            if decision is None:
                self._undecided[g].append((a, b))
            elif decision:
                group.forest.union(a, b)

    def _judge_waves(self) -> None:
        """Waves over what has finished, until none is left or more responses are waiting."""
        texts = [group.texts for group in self._groups]
        forests = [group.forest for group in self._groups]
        while self._queue.empty() and (wave := next_wave(self._undecided, forests)):
            try:
                probs = judge_and_join(
                    wave, texts, self.judge, self.threshold, forests, self._judged
                )
            except Exception as error:  # handed to the synchronous path (see close)
                self.error = error
                return
            for (g, i, j), p in zip(wave, probs, strict=True):
                rows = self._groups[g].rows
                self.verdicts[rows[i], rows[j]] = (texts[g][i], texts[g][j], p)
