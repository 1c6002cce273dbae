"""How many LingBot instances and which GPUs each gets (instance_layout auto | per_numa |
single), with the single-GPU fallback when no pair qualifies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


def _auto(eligible, verdicts, inputs, eligibility, policy) -> list[Selection]:
    remaining = list(eligible)
    selections: list[Selection] = []
    while (group := best_group(remaining, verdicts, policy.max_gpus_per_instance)) is not None:
        selections.append(Selection(group.gpus, _group_reason(group, _scope(group, inputs))))
        remaining = [index for index in remaining if index not in group.gpus]
    if not selections:
        return [_fallback(eligible, verdicts, inputs, eligibility, policy)]
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
    if not eligible:
        return []
    return LAYOUTS[policy.instance_layout](list(eligible), verdicts, inputs, eligibility, policy)


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
