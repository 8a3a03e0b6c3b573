"""The DARLING algorithm as small pure functions (numpy only; no torch, ray, vllm or nemo_rl).

One group = the n responses sampled for one prompt. The pipeline per group:

    partition (lexical rules + batched pair judge, union-find)  -> class ids
    diversity (n - |class|) / (n - 1), floored                  -> d_i
    fusion    quality * diversity (default)                      -> r_i
    advantage r_i - mean_j r_j (no std division by default)      -> A_i

The reward step belongs to the method `darling.method` names (and, for DARLING, the
`darling.fusion`): each is one module of `darling_nemo/methods/`, found through its
registry (docs/rivals.md). The partition, diversity and advantages here are shared.

Every function takes plain Python/numpy values so the same code serves the TRL engine,
the NeMo-RL adapter, `darling-score` and the evaluations. Reference semantics and where we
depart from them are documented on each function and in docs/fidelity.md.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from darling_nemo import methods
from darling_nemo.methods.base import GroupBatch, check_finite, method_inputs
from darling_nemo.methods.darling import QualityShift

PairJudge = Callable[[Sequence[tuple[str, str]]], Sequence[float]]
"""A batched semantic-equivalence judge: list of (response_a, response_b) -> P(similar) each.

Pairs are always sent as (responses[i], responses[j]) with i < j, like the reference code,
so an order-sensitive classifier sees the same orientation."""

SHORT_ANSWER_MAX_WORDS = 5


class Baseline(StrEnum):
    MEAN = "mean"
    LEAVE_ONE_OUT = "leave_one_out"


class Diversity(StrEnum):
    SEMANTIC = "semantic"  # the paper: classes of a learned partition (judge + lexical rules)
    NGRAM = "ngram"  # the reference ablation "quality x 4-gram": lexical diversity, no judge


class JudgeRounds(StrEnum):
    # Same classes either way. WAVES: pairs already joined are never judged (fewer pairs, up
    # to n-1 judge calls per step); ONE: every pair in one call, as the reference.
    WAVES = "waves"
    ONE = "one"


class PartitionScope(StrEnum):
    ALL = "all"  # reference default: diversity over every rollout, correct or not
    CORRECT = "correct"  # only responses with quality > 0 are partitioned; others get the floor


# ---------------------------------------------------------------------------------------------
# Lexical rules (decided without any classifier)
# ---------------------------------------------------------------------------------------------


def short_answer_equivalent(a: str, b: str) -> bool | None:
    """The reference short-answer rule, or None when it does not apply.

    Lower-case and split on whitespace. If the longer response has at most 5 words, the pair
    is equivalent iff 2 * |shared unique words| >= that word count (two empty responses:
    0 >= 0, equivalent). Longer responses return None (undecided).
    """
    words_a, words_b = a.strip().lower().split(), b.strip().lower().split()
    longest = max(len(words_a), len(words_b))
    if longest > SHORT_ANSWER_MAX_WORDS:
        return None
    return 2 * len(set(words_a) & set(words_b)) >= longest


def same_text(a: str, b: str) -> bool | None:
    """Only exact duplicates are decided (equivalent); everything else goes to the judge.
    For a judge of final answers (outcome exploration), where the short-answer rule would
    join "x = 4" and "x = 5"."""
    return True if a == b else None


PairRule = Callable[[str, str], bool | None]
"""Decides a pair without the judge (True/False) or leaves it to the judge (None)."""


def lexical_decision(a: str, b: str) -> bool | None:
    """Decide a pair without a classifier: exact duplicates, then the short-answer rule.

    Exact duplicates are equivalent (the reference sends them to the classifier; a
    sensible classifier agrees). This checks them before the short-answer rule, so
    "yes yes yes" vs "yes yes yes" is equivalent here although the reference rule alone
    says not (1 shared word * 2 < 3 words).
    """
    if a == b:
        return True
    return short_answer_equivalent(a, b)


# ---------------------------------------------------------------------------------------------
# Partition
# ---------------------------------------------------------------------------------------------


class UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def add(self) -> int:
        """A new singleton; returns its index (a streamed group grows as responses finish)."""
        self.parent.append(len(self.parent))
        return len(self.parent) - 1

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> bool:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)
        return True

    def labels(self) -> list[int]:
        """Canonical class ids: classes numbered 0, 1, ... in order of first member."""
        roots: dict[int, int] = {}
        return [roots.setdefault(self.find(i), len(roots)) for i in range(len(self.parent))]


@dataclass(frozen=True)
class Partition:
    """Equivalence classes of one group.

    class_ids[i] is the class of response i; classes are numbered 0, 1, ... in order of
    their first member, so two equal partitions have equal class_ids.
    """

    class_ids: list[int]
    pairs_judged: int  # pairs sent to the judge (here or, for `known` verdicts, earlier)
    pairs_total: int  # n * (n - 1) / 2

    @property
    def num_classes(self) -> int:
        return len(set(self.class_ids))


KnownVerdicts = dict[tuple[int, int], float]
"""Pairs of one group judged before (i < j, indices into the group) -> P(similar)."""


def partition_groups(
    groups: Sequence[Sequence[str]],
    judge: PairJudge | None,
    threshold: float,
    known: Sequence[KnownVerdicts] | None = None,
    rule: PairRule = lexical_decision,
) -> list[Partition]:
    """Partition many groups at once, sending pairs to `judge` in waves across all groups.

    Semantics (reference): the classes are the connected components of the graph whose edges
    are the equivalent pairs (union-find over all n(n-1)/2 pairs). A pair is equivalent if
    `lexical_decision` says so, or, when that is undecided, if judge(pair) > threshold.
    `judge=None` means no classifier: undecided pairs count as not equivalent.

    Economy: a pair whose two responses are already in one class is never judged. Each wave
    takes, per group, pairs whose classes form a forest (no two pairs of a wave could make
    each other redundant), so with a transitive judge a group of one class is settled in one
    wave of n-1 pairs. All groups' waves go to the judge in one call. The components are the
    same as all-pairs union-find for ANY deterministic judge: every pair that is skipped
    joins two responses that are already connected by equivalent pairs.

    known[g]: verdicts of group g's pairs judged before this call (judge_stream.py judges
    pairs while the rollout still runs); they join like fresh ones and are not judged again.
    Any subset of the judge's own verdicts gives the same components, by the argument above.

    rule: what is decided without the judge (`lexical_decision`, the reference's; or
    `same_text` for a judge of final answers).
    """
    forests = [UnionFind(len(g)) for g in groups]
    undecided: list[list[tuple[int, int]]] = []
    judged = [0] * len(groups)
    for g, (group, uf) in enumerate(zip(groups, forests, strict=True)):
        given = known[g] if known is not None else {}
        pending = []
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                decision = rule(group[i], group[j])
                if decision is None and (i, j) in given:
                    judged[g] += 1
                    decision = float(given[i, j]) > threshold
                if decision is None:
                    pending.append((i, j))
                elif decision:
                    uf.union(i, j)
        undecided.append(pending if judge is not None else [])

    while wave := next_wave(undecided, forests):
        assert judge is not None
        judge_and_join(wave, groups, judge, threshold, forests, judged)
    return _partitions(groups, forests, judged)


def next_wave(
    undecided: list[list[tuple[int, int]]], forests: Sequence[UnionFind]
) -> list[tuple[int, int, int]]:
    """The next wave of (group, i, j) pairs: per group, undecided pairs of different classes
    whose classes form a forest. Drops pairs already connected from `undecided` and keeps the
    ones that would close a cycle in this wave for a later one."""
    wave: list[tuple[int, int, int]] = []
    for g, (pending, uf) in enumerate(zip(undecided, forests, strict=True)):
        wave_forest: dict[int, int] = {}  # union-find over this group's class roots

        def root(r: int, forest: dict[int, int] = wave_forest) -> int:
            while forest.get(r, r) != r:
                r = forest[r]
            return r

        still_pending = []
        for i, j in pending:
            ri, rj = uf.find(i), uf.find(j)
            if ri == rj:
                continue  # already connected: never judged
            wi, wj = root(ri), root(rj)
            if wi == wj:
                still_pending.append((i, j))  # would close a cycle in this wave
                continue
            wave_forest[max(wi, wj)] = min(wi, wj)
            wave.append((g, i, j))
        undecided[g] = still_pending
    return wave


def judge_and_join(
    pairs: list[tuple[int, int, int]],
    groups: Sequence[Sequence[str]],
    judge: PairJudge,
    threshold: float,
    forests: Sequence[UnionFind],
    judged: list[int],
) -> list[float]:
    """One judge call for (group, i, j) pairs, sent as (groups[g][i], groups[g][j]); joins
    the pairs judged equivalent and returns the probabilities."""
    probs = [float(p) for p in judge([(groups[g][i], groups[g][j]) for g, i, j in pairs])]
    if len(probs) != len(pairs):
        raise ValueError(f"judge returned {len(probs)} probabilities for {len(pairs)} pairs")
    check_finite(probs, "judge probabilities")  # NaN > threshold is False: not silent
    for (g, i, j), p in zip(pairs, probs, strict=True):
        judged[g] += 1
        if p > threshold:
            forests[g].union(i, j)
    return probs


def _partitions(
    groups: Sequence[Sequence[str]], forests: list[UnionFind], judged: list[int]
) -> list[Partition]:
    return [
        Partition(uf.labels(), judged[g], len(groups[g]) * (len(groups[g]) - 1) // 2)
        for g, uf in enumerate(forests)
    ]


def partition_groups_in_one_call(
    groups: Sequence[Sequence[str]],
    judge: PairJudge | None,
    threshold: float,
    rule: PairRule = lexical_decision,
) -> list[Partition]:
    """The reference procedure: decide every pair the lexical rules leave open, all groups in
    one judge call, then union-find. Same classes as `partition_groups`; more pairs judged,
    but one round trip per step instead of up to n-1 (for a judge whose latency, not its
    throughput, is the cost)."""
    forests = [UnionFind(len(g)) for g in groups]
    undecided: list[tuple[int, int, int]] = []  # (group index, i, j)
    for g, group in enumerate(groups):
        for i in range(len(group)):
            for j in range(i + 1, len(group)):
                decision = rule(group[i], group[j])
                if decision is None:
                    undecided.append((g, i, j))
                elif decision:
                    forests[g].union(i, j)
    judged = [0] * len(groups)
    if judge is not None and undecided:
        judge_and_join(undecided, groups, judge, threshold, forests, judged)
    return _partitions(groups, forests, judged)


def partition_all_pairs(
    responses: Sequence[str], judge: PairJudge | None, threshold: float
) -> Partition:
    """One group, every pair decided: the specification `partition_groups` is tested against."""
    return partition_groups_in_one_call([responses], judge, threshold)[0]


# ---------------------------------------------------------------------------------------------
# Diversity
# ---------------------------------------------------------------------------------------------


def diversity_from_classes(class_ids: Sequence[int], *, floor: float) -> np.ndarray:
    """Div(y_i) = (n - |class(y_i)|) / (n - 1), then max(., floor).

    n = 1: the reference divides by zero; here a lone response has nothing to repeat, so
    its diversity is 1.0 (its advantage is 0 under any group baseline anyway).
    """
    ids = np.asarray(class_ids, dtype=np.int64)
    n = ids.size
    if n == 0:
        return np.zeros(0)
    if n == 1:
        return np.ones(1)
    sizes = np.bincount(ids)[ids]
    return np.maximum((n - sizes) / (n - 1), floor)


def diversity_correct_only(
    class_ids: Sequence[int], correct: Sequence[bool], *, floor: float
) -> np.ndarray:
    """Reference `partition_correct`: diversity among the correct responses only.

    `class_ids` must come from partitioning the correct responses alone (incorrect ones in
    singleton classes). With c correct responses, a correct response gets
    (c - |its class among correct|) / (c - 1); incorrect ones get the floor; if c <= 1 every
    response gets the floor (as the reference does, even the single correct one).
    """
    ids = np.asarray(class_ids, dtype=np.int64)
    mask = np.asarray(correct, dtype=bool)
    out = np.full(ids.size, floor, dtype=float)
    c = int(mask.sum())
    if c <= 1:
        return out
    sizes = np.bincount(ids[mask], minlength=int(ids.max()) + 1)[ids]
    out[mask] = np.maximum((c - sizes[mask]) / (c - 1), floor)
    return out


def ngram_diversity(responses: Sequence[str], *, n: int) -> np.ndarray:
    """Lexical diversity of the reference ablation ("quality x 4-gram").

    For each response: |its distinct whitespace n-grams found in no other response of the
    group| / (number of its n-grams, counted with repeats). A response shorter than n words
    has no n-grams and scores 0.
    """
    tokens = [r.split() for r in responses]
    grams = [{tuple(t[k : k + n]) for k in range(len(t) - n + 1)} for t in tokens]
    out = np.zeros(len(responses))
    for i, own in enumerate(grams):
        if len(tokens[i]) < n:
            continue
        others = set().union(*(g for j, g in enumerate(grams) if j != i))
        out[i] = len(own - others) / (len(tokens[i]) - n + 1)
    return out


# ---------------------------------------------------------------------------------------------
# Advantages (the rewards before them are the method's: darling_nemo/methods/)
# ---------------------------------------------------------------------------------------------


def group_indices(group_ids: Sequence[Hashable]) -> list[np.ndarray]:
    """Row indices of each group, in order of first appearance; rows need not be contiguous."""
    rows: dict[Hashable, list[int]] = {}
    for row, gid in enumerate(group_ids):
        rows.setdefault(gid, []).append(row)
    return [np.asarray(r, dtype=np.int64) for r in rows.values()]


def advantages(
    rewards: Sequence[float],
    group_ids: Sequence[Hashable],
    *,
    baseline: Baseline,
    normalize_std: bool,
    std_epsilon: float,
) -> np.ndarray:
    """A_i = r_i - baseline_i within each group (groups by id, any order, ragged sizes).

    mean: baseline = group mean. leave_one_out: mean of the OTHER responses of the group
    (a group of one gets advantage 0). normalize_std divides by (sample std + epsilon) where
    the group's sample std (ddof=1, as torch.std) is > 0; DARLING leaves it off.
    """
    r = check_finite(rewards, "rewards")
    if len(group_ids) != r.size:
        raise ValueError(f"{r.size} rewards but {len(group_ids)} group ids")
    out = np.zeros_like(r)
    for rows in group_indices(group_ids):
        g = r[rows]
        k = g.size
        if baseline is Baseline.LEAVE_ONE_OUT:
            base = (g.sum() - g) / (k - 1) if k > 1 else g
        else:
            base = np.full(k, g.mean())
        adv = g - base
        if normalize_std and k > 1:
            std = g.std(ddof=1)
            if std > 0:
                adv = adv / (std + std_epsilon)
        out[rows] = adv
    return out


# ---------------------------------------------------------------------------------------------
# The whole transform for a batch
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DarlingSettings:
    """The algorithm's knobs as plain values. No defaults here: `schema.DarlingConfig`
    holds them (the reference's) and builds this with `.settings()`."""

    diversity: Diversity
    ngram: int
    floor: float
    partition_scope: PartitionScope
    fusion: str  # a registered fusion (methods.fusion_names()), for method darling
    quality_shift: QualityShift
    baseline: Baseline
    normalize_std: bool
    std_epsilon: float
    threshold: float
    judge_rounds: JudgeRounds  # WAVES: partition_groups; ONE: partition_groups_in_one_call
    method: str  # a registered method (methods.method_names())
    keys: Mapping[str, Any]  # the methods' and fusions' own config keys (methods.Key)

    @property
    def partitions(self) -> bool:
        """Whether each group is cut into classes (of meaning, or of final answers for a
        method with answer classes), so the class metrics exist."""
        answers = methods.method(self.method).answer_classes
        return answers or self.diversity is Diversity.SEMANTIC


@dataclass(frozen=True)
class DarlingBatch:
    """Per-response outputs (in input row order) and per-group statistics."""

    quality: np.ndarray
    diversity: np.ndarray
    reward: np.ndarray
    advantage: np.ndarray
    class_ids: np.ndarray  # class within its group; -1 where not partitioned (ngram mode)
    # Per group, in order of first appearance of the group id:
    num_classes: list[int]  # 0 in ngram mode
    group_sizes: list[int]
    group_pairs_judged: list[int]
    group_pairs_total: list[int]  # n * (n - 1) / 2

    @property
    def pairs_judged(self) -> int:
        return sum(self.group_pairs_judged)

    @property
    def pairs_total(self) -> int:
        return sum(self.group_pairs_total)


def _local(
    known: Mapping[tuple[int, int], float], groups: Sequence[np.ndarray]
) -> list[KnownVerdicts]:
    """Batch-indexed verdicts -> per group, indexed within the group (rows ascending)."""
    where = {int(row): (g, k) for g, rows in enumerate(groups) for k, row in enumerate(rows)}
    local: list[KnownVerdicts] = [{} for _ in groups]
    for (a, b), p in known.items():
        (ga, ka), (gb, kb) = where.get(a, (-1, 0)), where.get(b, (-2, 0))
        if ga == gb:
            local[ga][min(ka, kb), max(ka, kb)] = p
    return local


@dataclass
class _Classes:
    """What the partition gives the reward step: per response and per group."""

    diversity: np.ndarray
    class_ids: np.ndarray
    num_classes: list[int]
    pairs_judged: list[int]


def _partition(
    responses: Sequence[str],
    q: np.ndarray,
    groups: Sequence[np.ndarray],
    judge: PairJudge | None,
    settings: DarlingSettings,
    known: Mapping[tuple[int, int], float] | None,
    answers: bool,
    out: _Classes,
) -> None:
    """Each group's classes and diversity: of final answers (`answers`: `judge` judges
    answers, only exact duplicates decided without it, every response) or of meaning (the
    judge and the lexical rules) over the partition scope (all, or the correct ones)."""
    everything = answers or settings.partition_scope is PartitionScope.ALL
    scoped = [rows if everything else rows[q[rows] > 0] for rows in groups]
    texts = [[responses[i] for i in rows] for rows in scoped]
    rule = same_text if answers else lexical_decision
    if settings.judge_rounds == JudgeRounds.ONE:
        parts = partition_groups_in_one_call(texts, judge, settings.threshold, rule)
    else:
        local = _local(known, scoped) if known and not answers else None
        parts = partition_groups(texts, judge, settings.threshold, local, rule)
    for rows, sub, part in zip(groups, scoped, parts, strict=True):
        out.pairs_judged.append(part.pairs_judged)
        out.num_classes.append(part.num_classes + (len(rows) - len(sub)))
        if everything:
            out.class_ids[rows] = part.class_ids
            out.diversity[rows] = diversity_from_classes(part.class_ids, floor=settings.floor)
        else:
            local_ids = np.arange(len(rows)) + len(sub)  # incorrect: singleton classes
            correct = q[rows] > 0
            local_ids[correct] = part.class_ids
            out.class_ids[rows] = local_ids
            out.diversity[rows] = diversity_correct_only(local_ids, correct, floor=settings.floor)


def darling_batch(
    responses: Sequence[str],
    quality: Sequence[float],
    group_ids: Sequence[Hashable],
    judge: PairJudge | None,
    settings: DarlingSettings,
    known: Mapping[tuple[int, int], float] | None = None,
    logprobs: Sequence[float] | None = None,
) -> DarlingBatch:
    """Quality + responses + group ids -> DARLING rewards and advantages for a whole batch.

    known: verdicts judged before, (a, b) with a < b indexing `responses` -> P(similar)
    (`partition_groups`' `known`); pairs across groups or outside the scope are ignored.
    logprobs: each response's mean token log-probability, for a method that declares it
    (`methods.base.method_inputs`; embeddings come from `judge.embed`).

    The reward is `settings.method`'s (darling_nemo/methods/, docs/rivals.md); its classes
    are of meaning (`settings.diversity`) or, for a method with answer classes, of final
    answers with `judge` judging answers. Every method's advantage is then `advantages` of
    its reward."""
    q = check_finite(quality, "quality")
    if not (len(responses) == q.size == len(group_ids)):
        raise ValueError(
            f"batch lengths differ: {len(responses)} responses, {q.size} quality, "
            f"{len(group_ids)} group ids"
        )
    method = methods.method(settings.method)
    if method.check_quality is not None:
        method.check_quality(q)
    groups = group_indices(group_ids)
    inputs = method_inputs(method, responses, judge, logprobs)
    out = _Classes(np.zeros(q.size), np.full(q.size, -1, dtype=np.int64), [], [])
    if method.answer_classes or settings.diversity == Diversity.SEMANTIC:
        _partition(responses, q, groups, judge, settings, known, method.answer_classes, out)
    elif settings.diversity == Diversity.NGRAM:
        for rows in groups:
            out.diversity[rows] = ngram_diversity([responses[i] for i in rows], n=settings.ngram)
            out.num_classes.append(0)
            out.pairs_judged.append(0)
    else:
        raise ValueError(f"unknown diversity {settings.diversity!r}: use 'semantic' or 'ngram'")

    batch = GroupBatch(q, out.diversity, out.class_ids, groups, **inputs)
    reward = method.rewards(batch, settings)
    adv = advantages(
        reward,
        group_ids,
        baseline=settings.baseline,
        normalize_std=settings.normalize_std,
        std_epsilon=settings.std_epsilon,
    )
    return DarlingBatch(
        quality=q,
        diversity=out.diversity,
        reward=reward,
        advantage=adv,
        class_ids=out.class_ids,
        num_classes=out.num_classes,
        group_sizes=[len(rows) for rows in groups],
        group_pairs_judged=out.pairs_judged,
        group_pairs_total=[len(rows) * (len(rows) - 1) // 2 for rows in groups],
    )
