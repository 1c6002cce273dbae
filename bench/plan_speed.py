"""Planner speed: one node's plan at 16, 32 and 64 GPUs against the same plan at 8 GPUs,
measured side by side in one run.

Each node is synthetic: GPUs under PCIe switches of four, two NUMA nodes, every pair
measured with its own figure (so no two groups tie and the group search cannot stop early),
the pairs under one switch fastest. For each size the 8-GPU plan and the larger plan are
timed in turn, A B A B ..., and the ratio is the median of the pair-by-pair ratios, so a
drift of the machine's speed cancels out. The target printed beside the 64-GPU ratio: the
pairs grow 64-fold from 8 to 64 GPUs, and the plan may take at most 4 times that growth
(256x): the group search stays polynomial.

Run from the repository root:  .venv/bin/python bench/plan_speed.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from typing import Any

from lingbot_fleet.plan import build_plan

BASE_GPUS = 8
SIZES = (16, 32, 64)
SWITCH_GPUS = 4
TARGET_64_RATIO = 256.0
POLICY = {"max_gpus_per_instance": 8, "require_same_numa": True}


def switch_tree_node(count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Facts and probe of a ``count``-GPU node of PCIe switches, in the documents' shapes."""
    gpus, probe_gpus, pairs = [], [], []
    topology = [["X"] * count for _ in range(count)]
    for index in range(count):
        uuid = f"GPU-{index:08x}-0000-4000-8000-000000000000"
        gpus.append(
            {
                "index": index,
                "lost": False,
                "uuid": uuid,
                "model": "NVIDIA L40S",
                "bus_id": f"0000:{index + 1:02x}:00.0",
                "numa_node": 0 if index < count // 2 else 1,
                "mig_mode": "disabled",
            }
        )
        probe_gpus.append(
            {"index": index, "uuid": uuid, "h2d_gbytes_per_s": 25.0, "d2h_gbytes_per_s": 26.0}
        )
    for a, b in itertools.permutations(range(count), 2):
        same_switch = a // SWITCH_GPUS == b // SWITCH_GPUS
        topology[a][b] = "PIX" if same_switch else "NODE"
        base = 26.0 if same_switch else 20.0
        figure = base + ((min(a, b) * count + max(a, b)) % 997) / 1000
        pairs.append(
            {
                "src": a,
                "dst": b,
                "can_access_peer": True,
                "p2p_enabled": {
                    "unidirectional_gbytes_per_s": figure,
                    "bidirectional_gbytes_per_s": 2 * figure,
                    "latency_ns": 1000,
                },
                "data_check": "passed",
                "error": None,
            }
        )
    read = [["X" if a == b else "OK" for b in range(count)] for a in range(count)]
    facts = {
        "schema_version": 1,
        "kernel": {"cmdline": "ro quiet"},
        "numa": {"node_count": 2},
        "gpus": gpus,
        "topology": topology,
        "p2p": {"read": read, "write": read},
    }
    return facts, {"schema_version": 1, "gpus": probe_gpus, "pairs": pairs}


def plan_seconds(node: tuple[dict[str, Any], dict[str, Any]]) -> float:
    facts, probe = node
    started = time.perf_counter()
    plan = build_plan(facts, probe, POLICY)
    elapsed = time.perf_counter() - started
    if not plan["instances"]:
        raise SystemExit(f"the {len(facts['gpus'])}-GPU node was planned with no instance")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    base = switch_tree_node(BASE_GPUS)
    print(f"planner: plan time against the {BASE_GPUS}-GPU plan ({args.repeats} pairs each)")
    print(f"{'GPUs':>5} {'base ms':>9} {'plan ms':>9} {'ratio':>8}  target")
    failed = False
    for size in SIZES:
        node = switch_tree_node(size)
        base_times, times, ratios = [], [], []
        for _ in range(args.repeats):
            base_s, size_s = plan_seconds(base), plan_seconds(node)
            base_times.append(base_s)
            times.append(size_s)
            ratios.append(size_s / base_s)
        ratio = statistics.median(ratios)
        target = ""
        if size == max(SIZES):
            met = ratio <= TARGET_64_RATIO
            failed |= not met
            target = f"<= {TARGET_64_RATIO:.0f}x {'met' if met else 'MISSED'}"
        print(
            f"{size:>5} {statistics.median(base_times) * 1000:>9.1f}"
            f" {statistics.median(times) * 1000:>9.1f} {ratio:>7.1f}x  {target}"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
