"""Which GPUs may cooperate: pair verdicts, then groups in which every pair qualifies.

A pair qualifies when, in both directions, peer access is on, the measured unidirectional
P2P bandwidth is at or above p2p_min_gbytes_per_s and the data check passed (and, with
require_same_numa, both GPUs sit on one NUMA node). Without a probe only NVLink pairs whose
P2P status is OK qualify (provisional). Groups: larger first, then the higher weakest pair,
then the lower GPU indices.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .model import DirectedPath, PlanInputs
from .policy import PlanPolicy
from .previous import PreviousPlan

P2P_OK = "OK"


@dataclass(frozen=True)
class PairVerdict:
    a: int
    b: int
    path_type: str | None
    nvlink_count: int
    forward_gbytes_per_s: float | None
    backward_gbytes_per_s: float | None
    latency_ns: float | None
    data_check: str
    same_numa: bool
    qualifies: bool
    problems: tuple[str, ...]
    hysteresis: str | None = None  # why the deployed decision was kept, when it mattered

    @property
    def gbytes_per_s(self) -> float | None:
        """The slower direction: what cooperating GPUs can count on."""
        if self.forward_gbytes_per_s is None or self.backward_gbytes_per_s is None:
            return None
        return min(self.forward_gbytes_per_s, self.backward_gbytes_per_s)

    @property
    def strength(self) -> float:
        """Ranks groups: measured GB/s, or the NVLink count when nothing was measured."""
        measured = self.gbytes_per_s
        return measured if measured is not None else float(self.nvlink_count)

    @property
    def name(self) -> str:
        return f"{self.a}-{self.b}"

    def reason(self) -> str:
        label = f"pair {self.name} ({self.path_type or 'topology unknown'})"
        if self.qualifies:
            if self.gbytes_per_s is not None:
                text = (
                    f"{label} qualifies: {self.gbytes_per_s:.1f} GB/s P2P (slower direction), "
                    "data check passed both ways"
                )
                return f"{text}; {self.hysteresis}" if self.hysteresis else text
            return f"{label} qualifies provisionally: NVLink with P2P status OK, not measured"
        text = f"{label} does not qualify: {'; '.join(self.problems)}"
        return f"{text}; {self.hysteresis}" if self.hysteresis else text


def _data_check(forward: DirectedPath, backward: DirectedPath) -> str:
    checks = {forward.data_check, backward.data_check}
    if not (forward.measured and backward.measured):
        return "not_measured"
    if "failed" in checks:
        return "failed"
    if checks == {"passed"}:
        return "passed"
    return "skipped"


def _measured_problems(
    forward: DirectedPath,
    backward: DirectedPath,
    threshold_gbytes_per_s: float,
    bar_gbytes_per_s: float,
) -> list[str]:
    problems: list[str] = []
    usable: list[DirectedPath] = []
    for path in (forward, backward):
        direction = f"{path.src}->{path.dst}"
        if not path.measured:
            problems.append(f"{direction} was not measured by the probe")
        elif path.error:
            problems.append(f"{direction} could not be measured: {path.error}")
        elif not path.can_access_peer or path.gbytes_per_s is None:
            status = f" (P2P status {path.p2p_read})" if path.p2p_read not in (None, P2P_OK) else ""
            problems.append(f"{direction} has no peer access{status}; copies are host-staged")
        else:
            usable.append(path)
    slow = [path for path in usable if (path.gbytes_per_s or 0.0) < bar_gbytes_per_s]
    if slow:
        figures = sorted({f"{path.gbytes_per_s:.2f}".rstrip("0").rstrip(".") for path in slow})
        where = ", ".join(f"{path.src}->{path.dst}" for path in slow)
        # The band is named only where it decided (a figure at or above the threshold but
        # below the bar), so a plan reads the same with or without a plan in force.
        if any((path.gbytes_per_s or 0.0) >= threshold_gbytes_per_s for path in slow):
            problems.append(
                f"measured {' and '.join(figures)} GB/s ({where}), below {bar_gbytes_per_s:g} "
                f"GB/s: p2p_min_gbytes_per_s {threshold_gbytes_per_s:g} GB/s plus its "
                "p2p_hysteresis_percent band, since the plan in force does not use this pair"
            )
        else:
            problems.append(
                f"measured {' and '.join(figures)} GB/s ({where}), below p2p_min_gbytes_per_s "
                f"{threshold_gbytes_per_s:g} GB/s"
            )
    failed = [path for path in usable if path.data_check == "failed"]
    if failed:
        problems.append(
            f"the data check failed ({', '.join(f'{p.src}->{p.dst}' for p in failed)}): peer "
            "writes reported success but the data did not arrive (an IOMMU in translated mode "
            "does this: use iommu=pt)"
        )
    problems += [
        f"{path.src}->{path.dst} data check {path.data_check or 'missing'}"
        for path in usable
        if path.data_check not in ("passed", "failed")
    ]
    return problems


def _provisional_problems(forward: DirectedPath, backward: DirectedPath) -> list[str]:
    problems: list[str] = []
    if forward.nvlink_count == 0 or backward.nvlink_count == 0:
        problems.append(
            f"no probe results and the path is {forward.path_type or 'unknown'} (PCIe), so its "
            "bandwidth is unknown; only NVLink pairs are used without a probe"
        )
    for path in (forward, backward):
        for capability, word in (("read", path.p2p_read), ("write", path.p2p_write)):
            if word != P2P_OK:
                problems.append(
                    f"{path.src}->{path.dst} P2P {capability} status is {word or 'unknown'}"
                )
    return problems


def _deployed_decision(
    inputs: PlanInputs, policy: PlanPolicy, previous: PreviousPlan, a: int, b: int
) -> bool | None:
    """The deployed plan's verdict on the pair; None when there is none, or when it was
    made against another p2p_min_gbytes_per_s (a policy change is judged afresh)."""
    uuid_a, uuid_b = inputs.gpu(a).uuid, inputs.gpu(b).uuid
    if not uuid_a or not uuid_b:
        return None
    if (
        previous.p2p_min_gbytes_per_s is not None
        and previous.p2p_min_gbytes_per_s != policy.p2p_min_gbytes_per_s
    ):
        return None
    return previous.pair_qualified.get(frozenset((uuid_a, uuid_b)))


def bandwidth_bar(policy: PlanPolicy, deployed: bool | None) -> float:
    """The figure a pair must reach: the threshold, moved by the hysteresis band away from
    the deployed decision (a used pair stays used down to threshold - band; an unused pair
    needs threshold + band)."""
    band = policy.p2p_min_gbytes_per_s * policy.p2p_hysteresis_percent / 100
    if deployed is None:
        return policy.p2p_min_gbytes_per_s
    return policy.p2p_min_gbytes_per_s + (-band if deployed else band)


def _hysteresis_note(
    policy: PlanPolicy, deployed: bool | None, figure: float | None, qualifies: bool
) -> str | None:
    """Said only when the band changed the verdict the threshold alone would give."""
    threshold = policy.p2p_min_gbytes_per_s
    if deployed is None or figure is None or qualifies != deployed:
        return None
    if (figure >= threshold) == qualifies:
        return None
    side = "below" if qualifies else "at or above"
    return (
        f"{figure:g} GB/s is {side} the threshold {threshold:g} GB/s but within its "
        f"p2p_hysteresis_percent {policy.p2p_hysteresis_percent:g}% band, so the deployed "
        f"plan's decision stands (the pair {'qualified' if deployed else 'did not qualify'})"
    )


def judge_pair(
    inputs: PlanInputs,
    policy: PlanPolicy,
    a: int,
    b: int,
    previous: PreviousPlan | None = None,
) -> PairVerdict:
    forward, backward = inputs.paths[(a, b)], inputs.paths[(b, a)]
    node_a, node_b = inputs.gpu(a).numa_node, inputs.gpu(b).numa_node
    same_numa = node_a == node_b and node_a >= 0
    deployed = _deployed_decision(inputs, policy, previous or PreviousPlan(), a, b)
    if inputs.probe_present:
        problems = _measured_problems(
            forward, backward, policy.p2p_min_gbytes_per_s, bandwidth_bar(policy, deployed)
        )
    else:
        problems = _provisional_problems(forward, backward)
    if policy.require_same_numa and not same_numa:
        problems.insert(
            0,
            f"GPUs on different NUMA nodes ({node_a} and {node_b}) and LingBot v0.4.2 refuses "
            "multi-GPU across NUMA nodes (require_same_numa)",
        )
    latencies = [p.latency_ns for p in (forward, backward) if p.latency_ns is not None]
    speeds = [
        p.gbytes_per_s
        for p in (forward, backward)
        if p.can_access_peer and p.gbytes_per_s is not None
    ]
    slower = min(speeds) if len(speeds) == 2 else None
    others_ok = all("below p2p_min_gbytes_per_s" in problem for problem in problems)
    return PairVerdict(
        a=a,
        b=b,
        path_type=forward.path_type,
        nvlink_count=min(forward.nvlink_count, backward.nvlink_count),
        forward_gbytes_per_s=forward.gbytes_per_s if forward.can_access_peer else None,
        backward_gbytes_per_s=backward.gbytes_per_s if backward.can_access_peer else None,
        latency_ns=max(latencies) if len(latencies) == 2 else None,
        data_check=_data_check(forward, backward),
        same_numa=same_numa,
        qualifies=not problems,
        problems=tuple(problems),
        hysteresis=_hysteresis_note(policy, deployed, slower, not problems)
        if inputs.probe_present and others_ok
        else None,
    )


def judge_pairs(
    inputs: PlanInputs,
    policy: PlanPolicy,
    indices: Iterable[int],
    previous: PreviousPlan | None = None,
) -> dict[tuple[int, int], PairVerdict]:
    ordered = sorted(indices)
    return {
        (a, b): judge_pair(inputs, policy, a, b, previous)
        for a, b in itertools.combinations(ordered, 2)
    }


@dataclass(frozen=True)
class Group:
    gpus: tuple[int, ...]  # ascending indices
    weakest_pair: PairVerdict | None

    @property
    def size(self) -> int:
        return len(self.gpus)


def _weakest(members: Sequence[int], verdicts: dict[tuple[int, int], PairVerdict]) -> PairVerdict:
    pairs = [verdicts[(a, b)] for a, b in itertools.combinations(members, 2)]
    return min(pairs, key=lambda verdict: (verdict.strength, verdict.a, verdict.b))


# Up to this many candidates the group is found by trying every combination (the original
# method, simple to read); beyond it by the bounded search below, which gives the same
# group (tests/plan/test_group_search.py checks both on random inputs of up to 10 GPUs).
EXACT_SEARCH_MAX_GPUS = 12
# Steps one clique search may take before it gives up on that size or threshold; keeps a
# 64-GPU node (or a hostile facts document) to well under a second per group.
SEARCH_STEP_BUDGET = 20_000


def best_group(
    candidates: Iterable[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    max_size: int,
) -> Group | None:
    """The best group of two or more candidates in which every pair qualifies, or None.

    Best: the most GPUs (at most ``max_size``), then the highest weakest pair, then the
    lowest GPU indices.
    """
    pool = sorted(candidates)
    if len(pool) <= EXACT_SEARCH_MAX_GPUS:
        return best_group_exhaustive(pool, verdicts, max_size)
    return best_group_bounded(pool, verdicts, max_size)


def best_group_exhaustive(
    candidates: Iterable[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    max_size: int,
) -> Group | None:
    """best_group by trying every combination: exponential in the number of candidates."""
    pool = sorted(candidates)
    neighbours = {
        gpu: {
            other
            for other in pool
            if other != gpu and verdicts[(min(gpu, other), max(gpu, other))].qualifies
        }
        for gpu in pool
    }
    for size in range(min(max_size, len(pool)), 1, -1):
        members_pool = [gpu for gpu in pool if len(neighbours[gpu]) >= size - 1]
        best: Group | None = None
        for members in itertools.combinations(members_pool, size):
            if not all(b in neighbours[a] for a, b in itertools.combinations(members, 2)):
                continue
            weakest = _weakest(members, verdicts)
            if best is None or weakest.strength > best.weakest_pair.strength:  # type: ignore[union-attr]
                best = Group(members, weakest)
        if best is not None:
            return best
    return None


class _SearchBudgetSpentError(Exception):
    """One clique search took SEARCH_STEP_BUDGET steps."""


def _first_clique(
    pool: Sequence[int],
    strengths: dict[int, dict[int, float]],
    size: int,
    threshold: float,
    step_budget: int,
) -> tuple[int, ...] | None:
    """The lowest-indexed ``size`` GPUs (in combination order) whose every pair qualifies
    with a strength of at least ``threshold``; None when there is none, or when finding one
    takes more than ``step_budget`` steps."""
    neighbours = {
        gpu: {other for other, strength in strengths[gpu].items() if strength >= threshold}
        for gpu in pool
    }
    # Drop GPUs with too few neighbours until none is left to drop (a k-core): each pass is
    # quadratic at most and removes at least one GPU.
    alive = set(pool)
    while True:
        weak = {gpu for gpu in alive if len(neighbours[gpu] & alive) < size - 1}
        if not weak:
            break
        alive -= weak
    if len(alive) < size:
        return None
    steps = 0

    def extend(chosen: list[int], candidates: list[int]) -> tuple[int, ...] | None:
        nonlocal steps
        if len(chosen) == size:
            return tuple(chosen)
        for position, gpu in enumerate(candidates):
            if len(chosen) + len(candidates) - position < size:
                return None
            steps += 1
            if steps > step_budget:
                raise _SearchBudgetSpentError
            following = [other for other in candidates[position + 1 :] if other in neighbours[gpu]]
            found = extend([*chosen, gpu], following)
            if found is not None:
                return found
        return None

    try:
        return extend([], sorted(alive))
    except _SearchBudgetSpentError:
        return None


def best_group_bounded(
    candidates: Iterable[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    max_size: int,
    step_budget: int = SEARCH_STEP_BUDGET,
) -> Group | None:
    """best_group in polynomial time: for each size (largest first), a binary search over
    the pair strengths for the highest one at which a group of that size exists, then the
    lowest-indexed such group.

    That is the exhaustive answer: a group whose weakest pair is the highest possible has
    every pair at or above that figure, and among those the first in combination order is
    the one the exhaustive search keeps. Each clique search is bounded by ``step_budget``
    steps; one that runs out counts as "no group" (the result is then a smaller or weaker
    group, still one in which every pair qualifies), so the search always ends in
    O(sizes x log(pairs) x step_budget).
    """
    pool = sorted(candidates)
    strengths: dict[int, dict[int, float]] = {gpu: {} for gpu in pool}
    for a, b in itertools.combinations(pool, 2):
        verdict = verdicts[(a, b)]
        if verdict.qualifies:
            strengths[a][b] = strengths[b][a] = verdict.strength
    thresholds = sorted({s for row in strengths.values() for s in row.values()}, reverse=True)
    if not thresholds:
        return None
    for size in range(min(max_size, len(pool)), 1, -1):
        found: dict[int, tuple[int, ...]] = {}
        lowest = len(thresholds) - 1
        members = _first_clique(pool, strengths, size, thresholds[lowest], step_budget)
        if members is None:
            continue
        found[lowest] = members
        # thresholds descend: a group at thresholds[i] is also one at every later index.
        low, high = 0, lowest
        while low < high:
            middle = (low + high) // 2
            members = _first_clique(pool, strengths, size, thresholds[middle], step_budget)
            if members is None:
                low = middle + 1
            else:
                found[middle] = members
                high = middle
        best = found[high]
        return Group(best, _weakest(best, verdicts))
    return None
