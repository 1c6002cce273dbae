"""An instance's LingBot config.yaml as a dict (docs/lingbot.md "config.yaml").

Bandwidths in config.yaml are Gbit/s: GB/s x 8. The threshold is written exactly (x 8 is
exact in binary floating point, and the policy allows two decimals), so what the planner
writes reads back as the same value. Measured figures only inform LingBot; they are kept
from the deployed plan while a new measurement stays within figure_tolerance_percent, so a
probe that moves them a little does not rewrite config.yaml (and restart LingBot).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .model import PlanInputs
from .previous import PreviousPlan

GBITS_PER_GBYTE = 8
KV_CACHE_SYNC_INTERVAL_MS = 10
KV_CACHE_COMPRESSION = "fp16"


def gbits_per_s(gbytes_per_s: float) -> float:
    """A measured figure in Gbit/s, to 0.1."""
    return round(gbytes_per_s * GBITS_PER_GBYTE, 1)


def threshold_gbits_per_s(gbytes_per_s: float) -> float:
    """The threshold in Gbit/s, exact: the config check compares it with the command line's."""
    return float(gbytes_per_s * GBITS_PER_GBYTE)


def within(value: float, kept: Any, tolerance_percent: float) -> bool:
    """Whether ``value`` is within ``tolerance_percent`` of the deployed figure ``kept``."""
    if isinstance(kept, bool) or not isinstance(kept, int | float):
        return False
    if kept == 0:
        return value == 0
    return abs(value - kept) <= abs(kept) * tolerance_percent / 100


def steady(value: float, kept: Any, tolerance_percent: float) -> float:
    """The deployed figure while ``value`` stays within tolerance of it, else ``value``."""
    return kept if within(value, kept, tolerance_percent) else value


def peer_link(
    inputs: PlanInputs,
    src: int,
    dst: int,
    dst_ordinal: int,
    threshold_gbytes_per_s: float,
    *,
    deployed: Mapping[str, Any] | None = None,
    tolerance_percent: float = 0.0,
) -> dict[str, Any]:
    """One peer link between two GPUs of an instance (every such pair qualifies).

    Unmeasured (provisional NVLink) links are written at the threshold; a measured figure
    is written at least at the threshold, since LingBot uses a link only at or above it and
    the planner's decision (with its hysteresis band) is the one that counts.
    """
    path = inputs.paths[(src, dst)]
    deployed = deployed or {}
    threshold = threshold_gbits_per_s(threshold_gbytes_per_s)
    measured = path.gbytes_per_s if path.measured and path.can_access_peer else None
    if measured is None:
        bandwidth = threshold
    else:
        figure = steady(gbits_per_s(measured), deployed.get("bandwidth_gbps"), tolerance_percent)
        bandwidth = max(figure, threshold)
    latency = round(path.latency_ns) if path.latency_ns is not None else 0
    kept_latency = deployed.get("latency_ns")
    if path.latency_ns is not None and isinstance(kept_latency, int) and kept_latency > 0:
        latency = int(steady(latency, kept_latency, tolerance_percent))
    return {
        "target_gpu_id": dst_ordinal,
        "path_type": path.path_type or "SYS",
        "bandwidth_gbps": bandwidth,
        "latency_ns": latency,
    }


def render_config(  # noqa: PLR0913 - the settings config.yaml is rendered from, keyword-only
    ordered: Sequence[int],
    inputs: PlanInputs,
    *,
    peer_access: bool,
    threshold_gbytes_per_s: float,
    layer_affinity: dict[str, str],
    gpu_weights: dict[str, float],
    kv_cache_strategy: str,
    previous: PreviousPlan | None = None,
    tolerance_percent: float = 0.0,
) -> dict[str, Any]:
    previous = previous or PreviousPlan()
    uuids = [inputs.gpu(index).uuid or "" for index in ordered]
    topology = []
    for ordinal, index in enumerate(ordered):
        links = []
        if peer_access:
            links = [
                peer_link(
                    inputs,
                    index,
                    other,
                    other_ordinal,
                    threshold_gbytes_per_s,
                    deployed=previous.peer_links.get((uuids[ordinal], uuids[other_ordinal])),
                    tolerance_percent=tolerance_percent,
                )
                for other_ordinal, other in enumerate(ordered)
                if other != index
            ]
        topology.append(
            {"gpu_id": ordinal, "bus_id": inputs.gpu(index).bus_id, "peer_links": links}
        )
    return {
        "hardware_profile": {
            "gpu_topology": topology,
            "p2p_threshold_gbps": threshold_gbits_per_s(threshold_gbytes_per_s),
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
