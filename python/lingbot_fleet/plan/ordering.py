"""GPU order inside an instance (the first is LingBot's primary), balancer weights, layer
affinity and the KV-cache strategy."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from .eligibility import Eligibility
from .grouping import PairVerdict
from .model import PlanInputs
from .policy import PlanPolicy

PRIMARY_MODULES = ("embed_tokens", "lm_head")


def bound_numa_node(members: Sequence[int], inputs: PlanInputs) -> int:
    """The NUMA node that holds most of the GPUs (the lowest on a tie)."""
    counts = Counter(inputs.gpu(index).numa_node for index in members)
    return min(counts, key=lambda node: (-counts[node], node))


def order_gpus(
    members: Sequence[int],
    bound_node: int,
    inputs: PlanInputs,
    eligibility: dict[int, Eligibility],
    policy: PlanPolicy,
) -> list[int]:
    """The primary first (docs/lingbot.md "The primary GPU"): host locality (on the bound
    NUMA node, then the best host bandwidth, h2d, where figures within
    host_bandwidth_tie_percent of the best count as equal), then the healthiest link (the
    gpu_checks findings about the GPU), then the lowest index."""
    local = [i for i in members if inputs.gpu(i).numa_node == bound_node] or list(members)
    known = [inputs.gpu(i).h2d_gbytes_per_s for i in local]
    measured = [value for value in known if value is not None]
    best = max(measured) if measured else None
    tie_floor = best * (1 - policy.host_bandwidth_tie_percent / 100) if best is not None else None

    def key(index: int) -> tuple[int, int, float, int, int]:
        gpu = inputs.gpu(index)
        h2d = gpu.h2d_gbytes_per_s
        near_best = h2d is None or tie_floor is None or h2d >= tie_floor
        return (
            0 if gpu.numa_node == bound_node else 1,
            0 if near_best else 1,
            0.0 if near_best else -(h2d or 0.0),
            eligibility[index].link_health_rank,
            index,
        )

    return sorted(members, key=key)


def order_reason(
    ordered: Sequence[int], bound_node: int, inputs: PlanInputs, eligibility: dict[int, Eligibility]
) -> str:
    primary = inputs.gpu(ordered[0])
    rank = eligibility[primary.index].link_health_rank
    health = "healthy link" if rank == 0 else f"link health rank {rank} (findings)"
    if primary.h2d_gbytes_per_s is not None:
        bandwidth = f"host bandwidth {primary.h2d_gbytes_per_s:.1f} GB/s (h2d)"
    else:
        bandwidth = "host bandwidth not measured"
    text = (
        f"GPU {primary.index} is the primary: {bandwidth}, on NUMA node {primary.numa_node}"
        f"{' (the bound node)' if primary.numa_node == bound_node else ''}, {health}"
    )
    rest = []
    for index in ordered[1:]:
        gpu = inputs.gpu(index)
        figure = f" ({gpu.h2d_gbytes_per_s:.1f} GB/s)" if gpu.h2d_gbytes_per_s is not None else ""
        rank = eligibility[index].link_health_rank
        health = f", link health rank {rank}" if rank else ""
        rest.append(f"GPU {index}{figure}{health}")
    if rest:
        text += (
            f"; then {', '.join(rest)} (order: host locality, then the healthiest link, "
            "then the index)"
        )
    return text + "."


def balancer_weights(ordered: Sequence[int], inputs: PlanInputs) -> tuple[dict[str, float], str]:
    """'gpu:<ordinal>' -> host bandwidth relative to the best (1.0), two decimals."""
    figures = [inputs.gpu(i).h2d_gbytes_per_s for i in ordered]
    if len(ordered) == 1:
        return {"gpu:0": 1.0}, "One GPU: weight 1.0."
    if any(value is None for value in figures):
        return (
            {f"gpu:{ordinal}": 1.0 for ordinal in range(len(ordered))},
            "Host bandwidth not measured (no probe): every GPU weighs 1.0.",
        )
    best = max(value for value in figures if value is not None)
    weights = {
        f"gpu:{ordinal}": max(0.01, round((value or 0.0) / best, 2))
        for ordinal, value in enumerate(figures)
    }
    parts = []
    for ordinal, index in enumerate(ordered):
        device = f"gpu:{ordinal}"
        parts.append(f"{device} (GPU {index}) {figures[ordinal]:.1f} GB/s -> {weights[device]:.2f}")
    return (
        weights,
        f"Weights are host bandwidth (h2d) relative to the best {best:.1f} GB/s: "
        f"{', '.join(parts)}.",
    )


def _layer_blocks(layer_count: int, gpu_count: int) -> list[range]:
    base, extra = divmod(layer_count, gpu_count)
    blocks, start = [], 0
    for position in range(gpu_count):
        size = base + (1 if position < extra else 0)
        blocks.append(range(start, start + size))
        start += size
    return blocks


def layer_affinity(gpu_count: int, policy: PlanPolicy) -> tuple[dict[str, str], str]:
    """embed_tokens and lm_head on the primary; decoder layers spread in plan order."""
    affinity = dict.fromkeys(PRIMARY_MODULES, "gpu:0")
    if gpu_count == 1:
        affinity["layers.*"] = "gpu:0"
        return affinity, "One GPU: every module on gpu:0."
    if policy.model_num_layers is None:
        affinity["layers.*"] = "gpu:1"
        return affinity, (
            "embed_tokens and lm_head on the primary gpu:0; layers.* on gpu:1: the layer count "
            "is unknown (the lingbot_service role reads it from the model's config.json; "
            "elsewhere set model_num_layers to spread the decoder layers over every GPU)."
        )
    spans = []
    for ordinal, block in enumerate(_layer_blocks(policy.model_num_layers, gpu_count)):
        for layer in block:
            affinity[f"layers.{layer}"] = f"gpu:{ordinal}"
        if len(block):
            spans.append(f"layers {block.start}-{block.stop - 1} on gpu:{ordinal}")
    return affinity, (
        f"embed_tokens and lm_head on the primary gpu:0; the {policy.model_num_layers} decoder "
        f"layers in contiguous blocks in plan order: {', '.join(spans)}."
    )


def kv_cache_strategy(
    ordered: Sequence[int], verdicts: dict[tuple[int, int], PairVerdict]
) -> tuple[str, str]:
    if len(ordered) == 1:
        return "host_fallback", "One GPU: no peer to share the KV cache with; host_fallback."
    pairs = [verdicts[(min(a, b), max(a, b))] for a in ordered for b in ordered if a < b]
    unchecked = [pair.name for pair in pairs if pair.data_check != "passed"]
    if unchecked:
        return "host_fallback", (
            f"host_fallback: the data check did not pass on pair(s) {', '.join(unchecked)} "
            "(p2p_direct needs every used pair checked)."
        )
    return (
        "p2p_direct",
        f"p2p_direct: every used pair ({', '.join(p.name for p in pairs)}) passed the data check.",
    )
