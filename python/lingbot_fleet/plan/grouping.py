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
                return (
                    f"{label} qualifies: {self.gbytes_per_s:.1f} GB/s P2P (slower direction), "
                    "data check passed both ways"
                )
            return f"{label} qualifies provisionally: NVLink with P2P status OK, not measured"
        return f"{label} does not qualify: {'; '.join(self.problems)}"


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
    forward: DirectedPath, backward: DirectedPath, threshold_gbytes_per_s: float
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
    slow = [path for path in usable if (path.gbytes_per_s or 0.0) < threshold_gbytes_per_s]
    if slow:
        figures = sorted({f"{path.gbytes_per_s:.1f}" for path in slow})
        where = ", ".join(f"{path.src}->{path.dst}" for path in slow)
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


def judge_pair(inputs: PlanInputs, policy: PlanPolicy, a: int, b: int) -> PairVerdict:
    forward, backward = inputs.paths[(a, b)], inputs.paths[(b, a)]
    node_a, node_b = inputs.gpu(a).numa_node, inputs.gpu(b).numa_node
    same_numa = node_a == node_b and node_a >= 0
    if inputs.probe_present:
        problems = _measured_problems(forward, backward, policy.p2p_min_gbytes_per_s)
    else:
        problems = _provisional_problems(forward, backward)
    if policy.require_same_numa and not same_numa:
        problems.insert(
            0,
            f"GPUs on different NUMA nodes ({node_a} and {node_b}) and LingBot v0.4.2 refuses "
            "multi-GPU across NUMA nodes (require_same_numa)",
        )
    latencies = [p.latency_ns for p in (forward, backward) if p.latency_ns is not None]
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
    )


def judge_pairs(
    inputs: PlanInputs, policy: PlanPolicy, indices: Iterable[int]
) -> dict[tuple[int, int], PairVerdict]:
    ordered = sorted(indices)
    return {(a, b): judge_pair(inputs, policy, a, b) for a, b in itertools.combinations(ordered, 2)}


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


def best_group(
    candidates: Iterable[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    max_size: int,
) -> Group | None:
    """The best group of two or more candidates in which every pair qualifies, or None."""
    pool = sorted(candidates)
    neighbours = {
        gpu: {
            other
            for other in pool
            if other != gpu and verdicts[tuple(sorted((gpu, other)))].qualifies
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
