"""The combinations of a matrix strategy: variants, each (stock, then each feature alone), pairwise
(a greedy AETG covering array of strength 2 over feature in/out, valid rows only), all."""

from __future__ import annotations

import itertools
import math
import random
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from forkbuild.errors import ConfigError
from forkbuild.series.combination import Combination, buildable, closure, coexist, from_features, of_variant
from forkbuild.series.config import Series

STRATEGIES = ("variants", "each", "pairwise", "all")
ALL_LIMIT = 64  # `all` refuses more combinations than this unless forced
ENUMERATION_LIMIT = 22  # `all` enumerates 2^n subsets: beyond this many features it refuses outright
ATTEMPTS = 4  # pairwise: greedy runs with different tie-breaks; the smallest wins
CANDIDATES = 30  # candidate rows per greedy step (AETG uses 50; 30 is as good on 15 features and faster)

Pair = tuple[tuple[str, bool], tuple[str, bool]]  # ((feature, in?), (feature, in?)), features in series order


@dataclass(frozen=True, kw_only=True)
class Matrix:
    strategy: str
    combinations: tuple[Combination, ...]
    lower_bound: int  # no valid matrix of this strategy has fewer combinations
    note: str = ""


def build_matrix(series: Series, strategy: str, *, base: str = "", force: bool = False,
                 limit: int = ALL_LIMIT) -> Matrix:
    """`strategy`: one of STRATEGIES."""
    if strategy == "variants":
        combos = tuple(of_variant(series, name) for name in series.variants)
        return Matrix(strategy=strategy, combinations=combos, lower_bound=len(combos))
    series = buildable(series)  # a feature without a patch yet is in no combination
    if strategy == "pairwise":
        # The greedy rows depend on random tie-breaks: the smallest of a few (seeded) runs.
        rows = min((pairwise_rows(series, seed=attempt) for attempt in range(ATTEMPTS)), key=len)
        return Matrix(strategy=strategy, combinations=_combinations(series, rows, base=base),
                      lower_bound=pairwise_lower_bound(series),
                      note=f"{len(feasible_pairs(series))} feasible (feature, in/out) pairs covered")
    if strategy == "each":
        rows = [frozenset(), *(closure(series, [name]) for name in series.features)]
    else:
        rows = valid_subsets(series)
        if len(rows) > limit and not force:
            raise ConfigError([f"--strategy all: {len(rows)} valid combinations, more than the limit of {limit}"],
                              source="command line")
    combos = _combinations(series, rows, base=base)
    return Matrix(strategy=strategy, combinations=combos, lower_bound=len(combos))


def build_order(series: Series, combinations: Iterable[Combination]) -> list[Combination]:
    """The combinations sorted by their feature lists in series order: consecutive builds then
    share the longest patch prefixes, whose applied trees the wheel builder reuses."""
    position = {name: index for index, name in enumerate(series.features)}
    return sorted(combinations, key=lambda combination: [position[name] for name in combination.features])


def _combinations(series: Series, rows: Iterable[frozenset[str]], *, base: str) -> tuple[Combination, ...]:
    combos: dict[str, Combination] = {}
    for row in rows:
        combination = from_features(series, sorted(row), base=base)
        combos.setdefault(combination.name, combination)
    return tuple(combos.values())


def feasible(series: Series, inside: Iterable[str], outside: Iterable[str]) -> bool:
    """Whether some valid combination holds every `inside` feature and none of `outside`: the
    smallest one is the closure of `inside` (requires only add features)."""
    held = closure(series, inside)
    return not (held & set(outside)) and coexist(series, held)


def feasible_pairs(series: Series) -> set[Pair]:
    pairs = set()
    for a, b in itertools.combinations(series.features, 2):
        for state_a, state_b in itertools.product((True, False), repeat=2):
            states = ((a, state_a), (b, state_b))
            if feasible(series, [name for name, on in states if on], [name for name, on in states if not on]):
                pairs.add(states)
    return pairs


def _row_pairs(names: list[str], row: frozenset[str]) -> set[Pair]:
    return {((a, a in row), (b, b in row)) for a, b in itertools.combinations(names, 2)}


def pairwise_rows(series: Series, *, seed: int) -> list[frozenset[str]]:
    """A greedy covering array (strength 2, binary: feature in or out), valid rows only."""
    names = list(series.features)
    uncovered = feasible_pairs(series)
    rows: list[frozenset[str]] = []
    rng = random.Random(seed)
    while uncovered:  # each candidate row starts from an uncovered pair: the best covers one at least
        best = max((_candidate_row(series, names, uncovered, rng) for _ in range(CANDIDATES)),
                   key=lambda row: len(_row_pairs(names, row) & uncovered))
        rows.append(best)
        uncovered -= _row_pairs(names, best)
    kept = list(rows)  # early rows' pairs are often all covered again by later ones: drop such rows
    for row in rows:
        if _row_pairs(names, row) <= set().union(*(_row_pairs(names, other) for other in kept if other is not row)):
            kept.remove(row)
    return kept


def _candidate_row(series: Series, names: list[str], uncovered: set[Pair], rng: random.Random) -> frozenset[str]:
    # Start from an uncovered pair whose features occur in the most uncovered pairs (AETG's first choice).
    weight = Counter(side for pair in uncovered for side in pair)
    top = max(weight[a] + weight[b] for a, b in uncovered)
    (a, state_a), (b, state_b) = rng.choice(sorted(pair for pair in uncovered if weight[pair[0]] + weight[pair[1]] == top))
    fixed = {a: state_a, b: state_b}
    rest = [name for name in names if name not in fixed]
    rng.shuffle(rest)
    for name in rest:
        scores = []
        for state in (True, False):
            trial = {**fixed, name: state}
            if not feasible(series, [n for n, s in trial.items() if s], [n for n, s in trial.items() if not s]):
                continue
            gain = sum(tuple(sorted([(name, state), side], key=lambda item: names.index(item[0]))) in uncovered
                       for side in fixed.items())
            scores.append((gain, rng.random(), state))
        fixed[name] = max(scores)[2]  # one state is always feasible: the row so far is
    return closure(series, [name for name, state in fixed.items() if state])


def pairwise_lower_bound(series: Series) -> int:
    """No strength-2 covering array of this series is smaller: the larger of (1) a pair with k
    feasible states needs k rows; (2) n features every two of which take all four states need an
    unconstrained binary covering array, at least the smallest N with C(N-1, ceil(N/2)) >= n
    (Kleitman-Spencer)."""
    states = Counter((a, b) for (a, _), (b, _) in feasible_pairs(series))
    by_pair = max(states.values(), default=1 if series.features else 0)
    # Features nobody requires, then drop those in a constrained pair until none is left.
    required = {needed for feature in series.features.values() for needed in feature.requires}
    free = [name for name in series.features if name not in required]
    while short := [(a, b) for a, b in itertools.combinations(free, 2) if states.get((a, b), 0) < 4]:
        counts = Counter(name for pair in short for name in pair)
        free.remove(max(counts, key=lambda name: counts[name]))
    minimum = {0: 1, 1: 2}.get(len(free), 4)
    while len(free) > 1 and math.comb(minimum - 1, math.ceil(minimum / 2)) < len(free):
        minimum += 1
    return max(by_pair, minimum)


def valid_subsets(series: Series) -> list[frozenset[str]]:
    """Every subset of the features closed under requires and free of conflicts."""
    names = list(series.features)
    if len(names) > ENUMERATION_LIMIT:
        raise ConfigError([f"--strategy all: {len(names)} features is 2^{len(names)} subsets to enumerate "
                           f"(limit: {ENUMERATION_LIMIT} features); use pairwise"], source="command line")
    subsets = (frozenset(name for index, name in enumerate(names) if mask >> index & 1)
               for mask in range(1 << len(names)))
    return [chosen for chosen in subsets if closure(series, chosen) == chosen and coexist(series, chosen)]
