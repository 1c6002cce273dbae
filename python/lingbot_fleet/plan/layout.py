"""How many LingBot instances and which GPUs each gets (instance_layout auto | per_numa |
single), with the single-GPU fallback when no pair qualifies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..node.findings import Finding
from .eligibility import Eligibility
from .grouping import Group, PairVerdict, best_group
from .model import PlanInputs
from .ordering import bound_numa_node, order_gpus
from .policy import PlanPolicy


@dataclass(frozen=True)
class Selection:
    gpus: tuple[int, ...]  # ascending
    reason: str
    fallback: bool = False


def _group_reason(group: Group, scope: str) -> str:
    weakest = group.weakest_pair
    assert weakest is not None
    if weakest.gbytes_per_s is not None:
        figure = f"{weakest.gbytes_per_s:.1f} GB/s"
    else:
        figure = f"NVLink ({weakest.path_type}), bandwidth not measured"
    members = ", ".join(str(index) for index in group.gpus)
    return (
        f"GPUs {members} form the largest group {scope} in which every pair qualifies "
        f"(weakest pair {weakest.name}: {figure})."
    )


def _scope(group: Group, inputs: PlanInputs) -> str:
    nodes = {inputs.gpu(index).numa_node for index in group.gpus}
    return f"on NUMA node {nodes.pop()}" if len(nodes) == 1 else "on this machine"


def best_single(
    candidates: Sequence[int],
    inputs: PlanInputs,
    eligibility: dict[int, Eligibility],
    policy: PlanPolicy,
) -> int:
    node = bound_numa_node(candidates, inputs)
    return order_gpus(candidates, node, inputs, eligibility, policy)[0]


def _failed_pairs_text(
    candidates: Sequence[int], verdicts: dict[tuple[int, int], PairVerdict]
) -> str:
    pool = set(candidates)
    texts = [v.reason() for key, v in sorted(verdicts.items()) if set(key) <= pool]
    return "; ".join(texts)


def _fallback(
    candidates: Sequence[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    inputs: PlanInputs,
    eligibility: dict[int, Eligibility],
    policy: PlanPolicy,
    *,
    scope: str = "",
) -> Selection:
    chosen = best_single(candidates, inputs, eligibility, policy)
    if len(candidates) == 1:
        why = f"GPU {chosen} is the only eligible GPU{scope}"
    else:
        failed = _failed_pairs_text(candidates, verdicts)
        why = f"no GPU pair{scope} qualifies for cooperative inference: {failed}"
    return Selection(
        (chosen,), f"Single GPU: {why}; LingBot runs on GPU {chosen} alone.", fallback=True
    )


def _alone(
    index: int, placed: Sequence[int], eligible: Sequence[int], verdicts, inputs: PlanInputs
) -> Selection:
    """A GPU left after the groups: it runs as its own single-GPU instance."""
    if len(eligible) == 1:
        why = f"GPU {index} is the only eligible GPU"
    else:
        partners = [
            verdicts[(min(index, other), max(index, other))]
            for other in sorted(set(eligible) - {index})
        ]
        failed = "; ".join(v.reason() for v in partners if not v.qualifies)
        taken = [v.name for v in partners if v.qualifies]
        parts = []
        if failed:
            parts.append(f"no pair with GPU {index} qualifies for cooperative inference: {failed}")
        if taken:
            parts.append(
                f"its qualifying pair(s) {', '.join(taken)} lead to GPUs already in a larger "
                "group (a group needs every pair to qualify)"
            )
        why = "; ".join(parts)
    node = inputs.gpu(index).numa_node
    return Selection(
        (index,),
        f"Single GPU: {why}; GPU {index} runs as its own instance on NUMA node {node}.",
        fallback=True,
    )


def _auto(eligible, verdicts, inputs, eligibility, policy) -> list[Selection]:
    """Every eligible GPU: the best groups first, then each GPU left as its own instance."""
    remaining = list(eligible)
    selections: list[Selection] = []
    while (group := best_group(remaining, verdicts, policy.max_gpus_per_instance)) is not None:
        selections.append(Selection(group.gpus, _group_reason(group, _scope(group, inputs))))
        remaining = [index for index in remaining if index not in group.gpus]
    placed = [index for s in selections for index in s.gpus]
    singles = (
        order_gpus(remaining, bound_numa_node(remaining, inputs), inputs, eligibility, policy)
        if remaining
        else []
    )
    selections += [_alone(index, placed, eligible, verdicts, inputs) for index in singles]
    return selections


def _per_numa(eligible, verdicts, inputs, eligibility, policy) -> list[Selection]:
    selections = []
    for node in sorted({inputs.gpu(index).numa_node for index in eligible}):
        pool = [index for index in eligible if inputs.gpu(index).numa_node == node]
        group = best_group(pool, verdicts, policy.max_gpus_per_instance)
        if group is not None:
            selections.append(Selection(group.gpus, _group_reason(group, f"on NUMA node {node}")))
        else:
            selections.append(
                _fallback(
                    pool, verdicts, inputs, eligibility, policy, scope=f" on NUMA node {node}"
                )
            )
    return selections


def _single(eligible, verdicts, inputs, eligibility, policy) -> list[Selection]:
    group = best_group(eligible, verdicts, policy.max_gpus_per_instance)
    if group is None:
        return [_fallback(eligible, verdicts, inputs, eligibility, policy)]
    return [Selection(group.gpus, _group_reason(group, _scope(group, inputs)))]


LAYOUTS = {"auto": _auto, "per_numa": _per_numa, "single": _single}


def choose_selections(
    eligible: Sequence[int],
    verdicts: dict[tuple[int, int], PairVerdict],
    inputs: PlanInputs,
    eligibility: dict[int, Eligibility],
    policy: PlanPolicy,
) -> list[Selection]:
    """The instances, best first (larger groups, then the better single GPUs), at most
    max_instances of them."""
    if not eligible:
        return []
    chosen = LAYOUTS[policy.instance_layout](list(eligible), verdicts, inputs, eligibility, policy)
    if policy.max_instances is not None:
        chosen = chosen[: policy.max_instances]
    return chosen


def idle_gpus_finding(
    eligible: Sequence[int], selections: Sequence[Selection], policy: PlanPolicy
) -> Finding | None:
    """Eligible GPUs that the policy leaves without an instance: which, why, and the fix."""
    used = {index for selection in selections for index in selection.gpus}
    idle = [index for index in eligible if index not in used]
    if not idle:
        return None
    gpus = ", ".join(map(str, idle))
    causes, fixes = [], []
    if policy.instance_layout != "auto":
        causes.append(f"instance_layout {policy.instance_layout}")
        fixes.append("set lingbot_service_instance_layout: auto (an instance per usable group)")
    if policy.max_instances is not None:
        causes.append(f"max_instances {policy.max_instances}")
        fixes.append(
            f"raise lingbot_service_max_instances to {policy.max_instances + len(idle)} or "
            "set it to null"
        )
    return Finding(
        code="PLAN_GPUS_IDLE",
        severity="warning",
        subject="node",
        message=(
            f"eligible GPU(s) {gpus} get no LingBot instance: the policy "
            f"({', '.join(causes)}) keeps them idle"
        ),
        evidence={"idle_gpus": idle, "instances": len(selections)},
        fix="; or ".join(fixes) + ", if they should serve",
    )


def numa_split_reason(
    selections: Sequence[Selection],
    verdicts: dict[tuple[int, int], PairVerdict],
    policy: PlanPolicy,
    inputs: PlanInputs,
) -> str | None:
    """Why GPUs that could cooperate over their links run as separate per-NUMA instances."""
    if not policy.require_same_numa or len(selections) < 2:
        return None
    owner = {index: position for position, s in enumerate(selections) for index in s.gpus}
    blocked = [
        v
        for (a, b), v in sorted(verdicts.items())
        if a in owner
        and b in owner
        and owner[a] != owner[b]
        and not v.same_numa
        and len(v.problems) == 1
    ]
    if not blocked:
        return None
    spans = "; ".join(
        f"GPUs {', '.join(map(str, s.gpus))} on NUMA node {inputs.gpu(s.gpus[0]).numa_node}"
        for s in selections
    )
    fastest = max(blocked, key=lambda v: v.strength)
    figure = (
        f"{fastest.gbytes_per_s:.1f} GB/s" if fastest.gbytes_per_s is not None else "NVLink speed"
    )
    return (
        "One instance per NUMA node: LingBot v0.4.2 refuses multi-GPU inference across NUMA nodes "
        f"(require_same_numa: true), although {len(blocked)} cross-node pair(s) reach the "
        f"threshold (up to {figure} over {fastest.path_type}); {spans}."
    )
