"""The lattice-routes task: a path across a walled grid, built on the mechanism of the paper's
pass@k claim (docs/preregistration.md).

A route goes from (0, 0) to (side, side) in 2*side unit moves, `side` "R" (x + 1) and `side`
"U" (y + 1): for side 4, 8 moves and 70 routes. A prompt lists 1 to 3 blocked lattice points
("B21 B33 B--": x then y; "B--" pads to three words); a route is correct when it passes
through none of them. Two answers are the same answer only when they are the same route
(the exact judge).

Why this task: the warm start learns routes under one habit shared by every prompt (few
turns, right first: weight exp(-turn_cost * turns - up_first_cost * [first move is U])),
so a few routes are right on most grids. On a "hard" grid the walls block the habitual
routes, and only routes the habit rarely writes are right. Reinforcing the correct
answers that are already likely (GRPO with 0/1 rewards) piles probability onto the habitual
routes on every grid, held-out ones included, and starves the rare routes the hard grids
need; DARLING's diversity term rewards a rare correct route even in a group where every
route is correct, where GRPO gives no signal. The answers are shared across prompts (one
route is right on many grids), unlike the dice task, where a multiset fits one sum.

The grids: every set of 1-3 blocked points (not the start or end) that leaves at least one
route, shuffled once by `grid_seed`: the first `heldout_grids` are held out of RL and of the
warm start, the next `train_grids` are RL's prompts, and the warm start draws from every
grid that is not held out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations, pairwise, permutations

import numpy as np

RIGHT, UP = "R", "U"
NO_WALL = "B--"
MAX_WALLS = 3

Point = tuple[int, int]
Grid = tuple[Point, ...]  # the blocked points, sorted


def wall_word(point: Point) -> str:
    """A blocked point as one prompt word: (2, 1) -> "B21"."""
    return f"B{point[0]}{point[1]}"


def prompt_text(grid: Grid) -> str:
    """The prompt of a grid: its blocked points in order, padded to three words."""
    words = [wall_word(p) for p in sorted(grid)]
    return " ".join(words + [NO_WALL] * (MAX_WALLS - len(words)))


def grid_of(prompt: str) -> Grid:
    """The grid a prompt lists (raises ValueError on anything else)."""
    words = prompt.split()
    if len(words) != MAX_WALLS:
        raise ValueError(f"not a routes prompt: {prompt!r} (expected e.g. 'B21 B33 B--')")
    points = []
    for word in words:
        if word == NO_WALL:
            continue
        if len(word) != 3 or word[0] != "B" or not word[1:].isdigit():
            raise ValueError(f"not a routes prompt: {prompt!r} (bad word {word!r})")
        points.append((int(word[1]), int(word[2])))
    return tuple(sorted(points))


def visited(route: Sequence[str]) -> list[Point]:
    """The lattice points a route steps on after the start, in order."""
    x = y = 0
    points = []
    for move in route:
        x, y = (x + 1, y) if move == RIGHT else (x, y + 1)
        points.append((x, y))
    return points


def turns(route: Sequence[str]) -> int:
    """How many times a route changes direction."""
    return sum(a != b for a, b in pairwise(route))


def route_judge(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """A core.PairJudge: P(similar) = 1.0 for the same route (the same words), else 0.0."""
    return [1.0 if a.split() == b.split() else 0.0 for a, b in pairs]


@dataclass(frozen=True)
class LatticeRoutes:
    """Routes across a (side+1) x (side+1) lattice avoiding a prompt's blocked points."""

    side: int
    turn_cost: float
    up_first_cost: float
    grid_seed: int
    heldout_grids: int
    train_grids: int
    hard_mass: float

    @cached_property
    def routes(self) -> tuple[tuple[str, ...], ...]:
        """Every route, in lexicographic order."""
        return tuple(sorted(set(permutations(RIGHT * self.side + UP * self.side))))

    @cached_property
    def prior(self) -> np.ndarray:
        """The habit: each route's weight, normalised over all routes."""
        weights = np.array(
            [
                math.exp(-self.turn_cost * turns(r) - self.up_first_cost * (r[0] == UP))
                for r in self.routes
            ]
        )
        return weights / weights.sum()

    @cached_property
    def _route_points(self) -> tuple[frozenset[Point], ...]:
        return tuple(frozenset(visited(r)) for r in self.routes)

    def valid(self, grid: Grid) -> list[int]:
        """The indices of the routes that avoid every blocked point of `grid`."""
        walls = set(grid)
        return [i for i, points in enumerate(self._route_points) if not walls & points]

    def habit_mass(self, grid: Grid) -> float:
        """The prior's probability of a correct route on `grid`."""
        return float(self.prior[self.valid(grid)].sum())

    def is_hard(self, grid: Grid) -> bool:
        """A grid whose correct routes hold less than `hard_mass` of the habit."""
        return self.habit_mass(grid) < self.hard_mass

    @cached_property
    def grids(self) -> tuple[Grid, ...]:
        """Every solvable grid of 1..3 blocked points, in the fixed order of `grid_seed`."""
        end = (self.side, self.side)
        points = [
            (x, y) for x in range(self.side + 1) for y in range(self.side + 1) if (x, y) != end
        ][1:]  # (0, 0), the start, is first
        every = [
            g for k in range(1, MAX_WALLS + 1) for g in combinations(points, k) if self.valid(g)
        ]
        order = np.random.default_rng(self.grid_seed).permutation(len(every))
        return tuple(every[i] for i in order)

    def split(self) -> dict[str, list[Grid]]:
        """held-out (never trained on), train (RL's prompts), warm_start (all but held-out)."""
        needed = self.heldout_grids + self.train_grids
        if needed > len(self.grids):
            raise ValueError(
                f"heldout_grids + train_grids = {needed} > the {len(self.grids)} solvable grids"
            )
        heldout = list(self.grids[: self.heldout_grids])
        return {
            "heldout": heldout,
            "train": list(self.grids[self.heldout_grids : needed]),
            "warm_start": list(self.grids[self.heldout_grids :]),
        }

    def vocabulary(self) -> list[str]:
        """The words of a word-level tokenizer: the two moves and every prompt word."""
        points = [(x, y) for x in range(self.side + 1) for y in range(self.side + 1)]
        return [RIGHT, UP, NO_WALL, *(wall_word(p) for p in points)]

    def is_correct(self, prompt: str, completion: str) -> bool:
        """A route of side R and side U moves that steps on no blocked point."""
        route = completion.split()
        return (
            route.count(RIGHT) == self.side
            and route.count(UP) == self.side
            and len(route) == 2 * self.side
            and not set(grid_of(prompt)) & set(visited(route))
        )

    def sample_answer(self, grid: Grid, rng: np.random.Generator, obey_walls: bool) -> list[str]:
        """A route for the warm start, drawn from the habit: restricted to the routes that
        avoid `grid`'s walls (obey_walls), or over all routes, whatever the walls."""
        if not obey_walls:
            return list(self.routes[int(rng.choice(len(self.routes), p=self.prior))])
        valid = self.valid(grid)
        weights = self.prior[valid]
        return list(self.routes[valid[int(rng.choice(len(valid), p=weights / weights.sum()))]])
