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

Prefix-complete judging (`add_partial`): a judge that reads only the first K whitespace
words of each response (the reference's word truncation; `prefix_words`) gets the same input
from any response that begins with a text whose first K words are each followed by
whitespace (`settled_words`). Such a response can join its group before it finishes. Every
verdict records the texts it was judged on, and `usable_verdicts` keeps one only if the
judge's input built from the final responses is the one it judged (a partial output that
the final response does not begin with, say a multi-byte character still being decoded or a
stop string cut off at the end, fails that and its pairs are judged again at the end).

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


def prefix_words(judge: object) -> int | None:
    """K when the judge's verdict on (a, b) depends only on the first K whitespace words of
    each response (its `prefix_words` attribute: the served and cross-encoder judges with
    word truncation); None for a judge that reads whole responses."""
    words = getattr(judge, "prefix_words", None)
    return int(words) if words is not None else None


def first_words(text: str, words: int) -> str:
    """The first `words` whitespace words of `text`, single-spaced (PairFormatter's cut)."""
    return " ".join(text.split()[:words])


def settled_words(partial: str, words: int) -> str | None:
    """`first_words` of every text that begins with `partial`, when `partial` already fixes
    them: it has more than `words` words, or exactly `words` and ends in whitespace (so the
    last of them cannot still grow). None while a later character could change them."""
    parts = partial.split()
    if len(parts) > words or (len(parts) == words and partial[-1:].isspace()):
        return " ".join(parts[:words])
    return None


def usable_verdicts(
    streamed: StreamedVerdicts, final: dict[int, str], words: int | None
) -> dict[tuple[int, int], float]:
    """(row a, row b) -> P(similar) of the streamed verdicts whose judge input is the one the
    final responses (`final`: row -> text) give: the same two texts, or with `words`, the
    same first words of each. Rows not in `final` are dropped."""

    def same_input(row: int, judged: str) -> bool:
        if row not in final:
            return False
        if words is None:
            return final[row] == judged
        return first_words(final[row], words) == first_words(judged, words)

    return {
        (a, b): p
        for (a, b), (text_a, text_b, p) in streamed.items()
        if same_input(a, text_a) and same_input(b, text_b)
    }


@dataclass
class _Group:
    rows: list[int] = field(default_factory=list)  # batch row of each member, arrival order
    texts: list[str] = field(default_factory=list)  # the final, or the settled first words
    early: list[bool] = field(default_factory=list)  # joined before it finished
    forest: UnionFind = field(default_factory=lambda: UnionFind(0))


class JudgeStream:
    """One rollout's worth of streamed judging: `open`, `add` per finished response, `close`."""

    def __init__(self, judge: PairJudge, threshold: float) -> None:
        self.judge = judge
        self.threshold = threshold
        self.prefix_words = prefix_words(judge)
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self._keys: dict[Hashable, int] = {}
        self._groups: list[_Group] = []
        self._undecided: list[list[tuple[int, int]]] = []
        self._judged: list[int] = []
        self._members: set[int] = set()  # rows in a group (the stream thread's)
        self.early_rows: set[int] = set()  # rows that joined before they finished
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
            self._queue.put((row, group, text, False))

    def add_partial(self, row: int, group: Hashable, partial: str) -> bool:
        """A response still being generated, as generated so far. It joins its group now
        when the judge reads only its first words and `partial` fixes them; True then."""
        if self._thread is None or self.prefix_words is None:
            return False
        settled = settled_words(partial, self.prefix_words)
        if settled is not None:
            self.add_settled(row, group, settled)
        return settled is not None

    def add_settled(self, row: int, group: Hashable, settled: str) -> None:
        """A response still being generated whose judged words are `settled` (a generation
        worker's `settled_words` of it): it joins its group now."""
        if self._thread is not None and self.prefix_words is not None:
            self._queue.put((row, group, settled, True))

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

    def _add(self, row: int, key: Hashable, text: str, early: bool) -> None:
        if row in self._members:  # joined early; its pairs are already queued
            return
        self._members.add(row)
        if early:
            self.early_rows.add(row)
        g = self._keys.setdefault(key, len(self._groups))
        if g == len(self._groups):
            self._groups.append(_Group())
            self._undecided.append([])
            self._judged.append(0)
        group = self._groups[g]
        new = group.forest.add()
        group.rows.append(row)
        group.texts.append(text)
        group.early.append(early)
        for old in range(new):
            a, b = (old, new) if group.rows[old] < row else (new, old)
            # The lexical rules read whole responses: a pair with an unfinished one goes to
            # the judge (where the final texts decide by rule, the hook ignores the verdict).
            decision = (
                None
                if early or group.early[old]
                else lexical_decision(group.texts[a], group.texts[b])
            )
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
