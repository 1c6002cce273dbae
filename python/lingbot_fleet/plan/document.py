"""The plan document (schema PLAN_SCHEMA_VERSION, docs/plan.md) and its explain text."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .baseline import compare_baseline
from .config import render_config, within
from .eligibility import Eligibility, judge_gpus, unknown_selectors
from .grouping import PairVerdict, judge_pairs
from .inputs import read_inputs
from .layout import Selection, choose_selections, idle_gpus_finding, numa_split_reason
from .model import PLAN_SCHEMA_VERSION, PlanInputError, PlanInputs
from .ordering import (
    balancer_weights,
    bound_numa_node,
    kv_cache_strategy,
    layer_affinity,
    order_gpus,
    order_reason,
)
from .policy import PlanPolicy, policy_from_mapping
from .previous import PreviousPlan, read_previous_plan

MAX_PORT = 65535

MODE_MULTI = "multi_gpu"
MODE_SINGLE = "single_gpu"
MODE_NONE = "none"
PROVISIONAL_NOTE = (
    "Provisional plan: no probe results, so no bandwidth is known; only NVLink pairs with P2P "
    "status OK are used, their peer links are written at the threshold, and the KV cache "
    "stays host_fallback. Run the probe and plan again."
)


def _default_names(
    selections: Sequence[Selection], nodes: Sequence[int], policy: PlanPolicy
) -> list[str]:
    if len(selections) == 1 and policy.instance_layout != "per_numa":
        return ["main"]
    per_node = Counter(nodes)
    seen: Counter[int] = Counter()
    names = []
    for node in nodes:
        seen[node] += 1
        names.append(f"numa{node}" if per_node[node] == 1 else f"numa{node}-{seen[node]}")
    return names


def _instance_names(
    selections: Sequence[Selection],
    nodes: Sequence[int],
    policy: PlanPolicy,
    inputs: PlanInputs,
    previous: PreviousPlan,
) -> list[str]:
    """``main`` for a lone instance, else ``numa<N>`` (``numa<N>-<k>``); an instance with
    the same GPUs (by UUID) as a deployed one keeps the deployed name, so adding instances
    beside it does not rename (and restart) it."""
    kept: list[str | None] = []
    for selection in selections:
        members = frozenset(inputs.gpu(index).uuid or "" for index in selection.gpus)
        name = previous.instance_names.get(members)
        kept.append(name if name and name not in kept else None)
    taken = {name for name in kept if name}
    names = []
    for kept_name, default, node in zip(
        kept, _default_names(selections, nodes, policy), nodes, strict=True
    ):
        name, count = kept_name or default, 1
        while kept_name is None and name in taken:
            count += 1
            name = f"numa{node}-{count}"
        taken.add(name)
        names.append(name)
    return names


def _steady_weights(
    weights: dict[str, float],
    ordered: Sequence[int],
    inputs: PlanInputs,
    previous: PreviousPlan,
    policy: PlanPolicy,
) -> tuple[dict[str, float], bool]:
    """Deployed weights that the new ones are within figure_tolerance_percent of stay."""
    uuids = [inputs.gpu(index).uuid or "" for index in ordered]
    members = frozenset(uuids)
    steady, kept = {}, False
    for ordinal, uuid in enumerate(uuids):
        device = f"gpu:{ordinal}"
        deployed = previous.weights.get((members, uuid))
        if (
            deployed is not None
            and deployed != weights[device]
            and within(weights[device], deployed, policy.figure_tolerance_percent)
        ):
            steady[device], kept = deployed, True
        else:
            steady[device] = weights[device]
    return steady, kept


def _peer_pairs(
    ordered: Sequence[int], verdicts: dict[tuple[int, int], PairVerdict], inputs: PlanInputs
) -> list[dict[str, Any]]:
    pairs = []
    for a in ordered:
        for b in ordered:
            if a == b:
                continue
            path = inputs.paths[(a, b)]
            verdict = verdicts[(min(a, b), max(a, b))]
            pairs.append(
                {
                    "src": a,
                    "dst": b,
                    "path_type": path.path_type,
                    "gbytes_per_s": path.gbytes_per_s if path.measured else None,
                    "latency_ns": path.latency_ns if path.measured else None,
                    "data_check": verdict.data_check,
                }
            )
    return pairs


def _numa_reason(members: Sequence[int], node: int, inputs: PlanInputs, policy: PlanPolicy) -> str:
    nodes = sorted({inputs.gpu(index).numa_node for index in members})
    if len(nodes) == 1:
        return (
            f"Bound with numactl --cpunodebind={node} --membind={node}: its GPUs sit on NUMA "
            f"node {node}."
        )
    return (
        f"Bound to NUMA node {node}, which holds most of its GPUs; they span nodes "
        f"{', '.join(map(str, nodes))} (require_same_numa is {policy.require_same_numa}: "
        "LingBot v0.4.2 would refuse this)."
    )


def _instance(
    *,
    position: int,
    name: str,
    selection: Selection,
    inputs: PlanInputs,
    policy: PlanPolicy,
    eligibility: dict[int, Eligibility],
    verdicts: dict[tuple[int, int], PairVerdict],
    previous: PreviousPlan,
) -> dict[str, Any]:
    node = bound_numa_node(selection.gpus, inputs)
    ordered = order_gpus(selection.gpus, node, inputs, eligibility, policy)
    weights, weights_reason = balancer_weights(ordered, inputs)
    weights, kept = _steady_weights(weights, ordered, inputs, previous, policy)
    if kept:
        weights_reason += (
            f" Deployed weights within figure_tolerance_percent "
            f"{policy.figure_tolerance_percent:g}% of these are kept: "
            f"{', '.join(f'{device} {weight:.2f}' for device, weight in weights.items())}."
        )
    affinity, affinity_reason = layer_affinity(len(ordered), policy)
    strategy, strategy_reason = kv_cache_strategy(ordered, verdicts)
    peer_access = len(ordered) > 1
    uuids = [inputs.gpu(index).uuid or "" for index in ordered]
    port = policy.base_port + position
    if port > MAX_PORT:
        raise PlanInputError(
            f"instance {position} ({name}) would listen on port {port}, above {MAX_PORT}: "
            f"base_port {policy.base_port} leaves room for {MAX_PORT - policy.base_port + 1} "
            "instances; set base_port lower"
        )
    return {
        "name": name,
        "numa_node": node,
        "numactl": {"cpunodebind": node, "membind": node},
        "gpus": ordered,
        "primary": ordered[0],
        "gpu_uuids": uuids,
        "bus_ids": [inputs.gpu(index).bus_id for index in ordered],
        "environment": {
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": ",".join(uuids),
        },
        "gpus_argument": ",".join(str(ordinal) for ordinal in range(len(ordered))),
        "peer_access": peer_access,
        "peer_access_threshold_gbytes_per_s": policy.p2p_min_gbytes_per_s,
        "peer_access_pairs": _peer_pairs(ordered, verdicts, inputs) if peer_access else [],
        "gpu_weights": weights,
        "layer_affinity": affinity,
        "kv_cache_strategy": strategy,
        "port": port,
        "fallback": selection.fallback,
        "reasons": {
            "gpus": selection.reason,
            "numa_node": _numa_reason(selection.gpus, node, inputs, policy),
            "order": order_reason(ordered, node, inputs, eligibility),
            "gpu_weights": weights_reason,
            "layer_affinity": affinity_reason,
            "kv_cache_strategy": strategy_reason,
            "port": f"Port {port}: base_port {policy.base_port} + instance {position}.",
        },
        "config": render_config(
            ordered,
            inputs,
            peer_access=peer_access,
            threshold_gbytes_per_s=policy.p2p_min_gbytes_per_s,
            layer_affinity=affinity,
            gpu_weights=weights,
            kv_cache_strategy=strategy,
            previous=previous,
            tolerance_percent=policy.figure_tolerance_percent,
        ),
    }


def _gpu_entry(
    index: int, inputs: PlanInputs, eligibility: dict[int, Eligibility]
) -> dict[str, Any]:
    gpu = inputs.gpu(index)
    return {
        "index": index,
        "uuid": gpu.uuid,
        "model": gpu.model,
        "bus_id": gpu.bus_id,
        "numa_node": gpu.numa_node,
        "h2d_gbytes_per_s": gpu.h2d_gbytes_per_s,
        "d2h_gbytes_per_s": gpu.d2h_gbytes_per_s,
        "eligible": eligibility[index].eligible,
        "link_health_rank": eligibility[index].link_health_rank,
        "findings": [finding.code for finding in gpu.findings],
        "reasons": list(eligibility[index].reasons),
    }


def _pair_entry(verdict: PairVerdict) -> dict[str, Any]:
    return {
        "pair": verdict.name,
        "path_type": verdict.path_type,
        "nvlink_count": verdict.nvlink_count,
        "forward_gbytes_per_s": verdict.forward_gbytes_per_s,
        "backward_gbytes_per_s": verdict.backward_gbytes_per_s,
        "gbytes_per_s": verdict.gbytes_per_s,
        "latency_ns": verdict.latency_ns,
        "data_check": verdict.data_check,
        "same_numa": verdict.same_numa,
        "qualifies": verdict.qualifies,
        "reason": verdict.reason() + ".",
    }


def _mode(instances: Sequence[dict[str, Any]]) -> str:
    if not instances:
        return MODE_NONE
    return MODE_MULTI if any(len(i["gpus"]) > 1 for i in instances) else MODE_SINGLE


def _summary(mode: str, instances: Sequence[dict[str, Any]], provisional: bool) -> str:
    if mode == MODE_NONE:
        return "No GPU is eligible: LingBot cannot be placed on this node."
    parts = [
        f"{i['name']} on NUMA node {i['numa_node']} with GPU{'s' if len(i['gpus']) > 1 else ''} "
        f"{', '.join(map(str, i['gpus']))} ({i['kv_cache_strategy']}, port {i['port']})"
        for i in instances
    ]
    prefix = "Provisional: " if provisional else ""
    return f"{prefix}{len(instances)} LingBot instance(s): {'; '.join(parts)}."


def _mode_reason(mode: str, instances, selections, eligibility, split_reason) -> str:
    if mode == MODE_NONE:
        reasons = [r for e in eligibility.values() for r in e.reasons]
        return "No eligible GPU. " + " ".join(reasons)
    texts = [s.reason for s in selections]
    if split_reason:
        texts.append(split_reason)
    return " ".join(texts)


def _layer_count_note(instances: Sequence[dict[str, Any]], policy: PlanPolicy) -> str | None:
    wide = [i["name"] for i in instances if len(i["gpus"]) > 2]
    if policy.model_num_layers is not None or not wide:
        return None
    return (
        f"Instance(s) {', '.join(wide)} have three or more GPUs but the model's layer count is "
        "unknown, so every decoder layer (layers.*) sits on gpu:1: set model_num_layers (the "
        "lingbot_service role reads num_hidden_layers from the model's config.json)."
    )


def build_plan(
    facts: Mapping[str, Any],
    probe: Mapping[str, Any] | None = None,
    policy: PlanPolicy | Mapping[str, Any] | None = None,
    findings: Iterable[Any] | None = None,
    previous_plan: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The plan document for one node. Deterministic: same inputs, same document.

    ``previous_plan`` is the plan in force on the node (/etc/lingbot/plan.json): with it, a
    pair's decision changes only when its figure leaves the hysteresis band, figures within
    tolerance stay as written, and instances with the same GPUs keep their names.
    """
    if not isinstance(policy, PlanPolicy):
        policy = policy_from_mapping(policy)
    inputs = read_inputs(facts, probe, findings)
    previous = read_previous_plan(previous_plan)
    eligibility = judge_gpus(inputs, policy)
    eligible = [index for index, verdict in sorted(eligibility.items()) if verdict.eligible]
    verdicts = judge_pairs(inputs, policy, [gpu.index for gpu in inputs.gpus], previous)
    selections = choose_selections(eligible, verdicts, inputs, eligibility, policy)
    idle = idle_gpus_finding(eligible, selections, policy)
    selections = sorted(selections, key=lambda s: (bound_numa_node(s.gpus, inputs), s.gpus))
    nodes = [bound_numa_node(s.gpus, inputs) for s in selections]
    names = _instance_names(selections, nodes, policy, inputs, previous)
    instances = [
        _instance(
            position=position,
            name=name,
            selection=selection,
            inputs=inputs,
            policy=policy,
            eligibility=eligibility,
            verdicts=verdicts,
            previous=previous,
        )
        for position, (name, selection) in enumerate(zip(names, selections, strict=True))
    ]
    used = {index for s in selections for index in s.gpus}
    provisional = not inputs.probe_present
    mode = _mode(instances)
    split_reason = numa_split_reason(selections, verdicts, policy, inputs)
    if split_reason:
        for instance in instances:
            instance["reasons"]["layout"] = split_reason
    notes = unknown_selectors(policy, inputs)
    notes += [note for note in (previous.note, _layer_count_note(instances, policy)) if note]
    if provisional:
        notes.insert(0, PROVISIONAL_NOTE)
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "provisional": provisional,
        "mode": mode,
        "summary": _summary(mode, instances, provisional),
        "mode_reason": _mode_reason(mode, instances, selections, eligibility, split_reason),
        "inputs": {
            "probe": inputs.probe_present,
            "probe_timestamp": inputs.probe_timestamp,
            "gpu_count": len(inputs.gpus),
            "numa_node_count": inputs.numa_node_count,
            "findings": sum(len(gpu.findings) for gpu in inputs.gpus),
        },
        "policy": policy.to_dict(),
        "gpus": [_gpu_entry(gpu.index, inputs, eligibility) for gpu in inputs.gpus],
        "pairs": [_pair_entry(verdict) for _, verdict in sorted(verdicts.items())],
        "instances": instances,
        "unused_gpus": [
            {
                "index": index,
                "reason": (
                    " ".join(eligibility[index].reasons)
                    if not eligibility[index].eligible
                    else f"GPU {index} is eligible but the policy leaves it idle: "
                    f"{idle.message if idle else 'see mode_reason'}; fix: "
                    f"{idle.fix if idle else 'see mode_reason'}."
                ),
            }
            for index in sorted(eligibility)
            if index not in used
        ],
        "baseline": compare_baseline(policy.baseline, inputs, verdicts),
        "notes": notes,
        "findings": [idle.to_dict()] if idle else [],
    }


def explain_plan(plan: Mapping[str, Any]) -> str:
    """A human-readable summary of a plan document."""
    lines = [
        f"LingBot plan (schema {plan['schema_version']}, mode {plan['mode']})",
        plan["summary"],
        "",
    ]
    lines += [f"note: {note}" for note in plan["notes"]]
    lines.append(f"why: {plan['mode_reason']}")
    lines.append("")
    lines.append("GPUs:")
    for gpu in plan["gpus"]:
        state = "eligible" if gpu["eligible"] else "not eligible"
        lines.append(f"  GPU {gpu['index']} {gpu['bus_id']} NUMA {gpu['numa_node']}: {state}")
        lines += [f"    {reason}" for reason in gpu["reasons"]]
    if plan["pairs"]:
        lines.append("Pairs:")
        lines += [f"  {pair['reason']}" for pair in plan["pairs"]]
    for instance in plan["instances"]:
        lines.append("")
        lines.append(
            f"Instance {instance['name']}: numactl --cpunodebind={instance['numa_node']} "
            f"--membind={instance['numa_node']}, port {instance['port']}"
        )
        lines.append(f"  CUDA_VISIBLE_DEVICES={instance['environment']['CUDA_VISIBLE_DEVICES']}")
        lines.append(
            f"  --gpus {instance['gpus_argument']} --peer-access-threshold "
            f"{instance['peer_access_threshold_gbytes_per_s']:g}   (GPU order {instance['gpus']})"
        )
        lines.append(
            f"  kv_cache_strategy {instance['kv_cache_strategy']}, "
            f"weights {instance['gpu_weights']}"
        )
        lines += [f"  {key}: {text}" for key, text in instance["reasons"].items()]
    for unused in plan["unused_gpus"]:
        lines.append(f"Unused GPU {unused['index']}: {unused['reason']}")
    for finding in plan.get("findings") or []:
        lines.append(f"finding {finding['severity']} {finding['code']}: {finding['message']}")
    baseline = plan.get("baseline")
    if baseline:
        lines.append("")
        lines.append(f"Baseline ({baseline['model']}): {baseline['reason']}")
        lines += [f"  {entry['reason']} [{entry['status']}]" for entry in baseline["paths"]]
    return "\n".join(lines) + "\n"
