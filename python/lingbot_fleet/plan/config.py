"""An instance's LingBot config.yaml as a dict (docs/lingbot.md "config.yaml").

Bandwidths in config.yaml are Gbit/s: measured GB/s x 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .model import PlanInputs

GBITS_PER_GBYTE = 8
KV_CACHE_SYNC_INTERVAL_MS = 10
KV_CACHE_COMPRESSION = "fp16"


def gbits_per_s(gbytes_per_s: float) -> float:
    return round(gbytes_per_s * GBITS_PER_GBYTE, 1)


def peer_link(
    inputs: PlanInputs, src: int, dst: int, dst_ordinal: int, threshold_gbytes_per_s: float
) -> dict[str, Any]:
    """One peer link; unmeasured (provisional NVLink) links are written at the threshold."""
    path = inputs.paths[(src, dst)]
    measured = path.gbytes_per_s if path.measured and path.can_access_peer else None
    return {
        "target_gpu_id": dst_ordinal,
        "path_type": path.path_type or "SYS",
        "bandwidth_gbps": gbits_per_s(measured if measured is not None else threshold_gbytes_per_s),
        "latency_ns": round(path.latency_ns) if path.latency_ns is not None else 0,
    }


def render_config(
    ordered: Sequence[int],
    inputs: PlanInputs,
    *,
    peer_access: bool,
    threshold_gbytes_per_s: float,
    layer_affinity: dict[str, str],
    gpu_weights: dict[str, float],
    kv_cache_strategy: str,
) -> dict[str, Any]:
    topology = []
    for ordinal, index in enumerate(ordered):
        links = []
        if peer_access:
            links = [
                peer_link(inputs, index, other, other_ordinal, threshold_gbytes_per_s)
                for other_ordinal, other in enumerate(ordered)
                if other != index
            ]
        topology.append(
            {"gpu_id": ordinal, "bus_id": inputs.gpu(index).bus_id, "peer_links": links}
        )
    return {
        "hardware_profile": {
            "gpu_topology": topology,
            "p2p_threshold_gbps": gbits_per_s(threshold_gbytes_per_s),
            "layer_affinity": dict(layer_affinity),
        },
        "load_balancer": {
            "type": "adaptive" if len(ordered) > 1 else "round_robin",
            "config": {"gpu_weights": dict(gpu_weights)},
        },
        "kv_cache_strategy": kv_cache_strategy,
        "kv_cache_sync_interval_ms": KV_CACHE_SYNC_INTERVAL_MS,
        "kv_cache_compression": KV_CACHE_COMPRESSION,
        "debug_mode": False,
    }
