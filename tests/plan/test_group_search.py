"""The planner's two group searches agree, and the bounded one keeps a 64-GPU node planned.

``best_group`` tries every combination up to EXACT_SEARCH_MAX_GPUS candidates and searches
by bounded steps beyond; the bounded search claims the exhaustive answer. Random pair
verdicts on up to 10 GPUs check the claim where both can run; a 64-GPU NVSwitch-like node
and a 64-GPU node of hostile figures (every strength distinct, a clique hidden among them)
check that planning at that size ends with a valid group.
"""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot_fleet.plan import build_plan
from lingbot_fleet.plan.grouping import (
    PairVerdict,
    best_group,
    best_group_bounded,
    best_group_exhaustive,
)


def _verdict(a: int, b: int, strength: float, qualifies: bool) -> PairVerdict:
    return PairVerdict(
        a=a,
        b=b,
        path_type="PIX",
        nvlink_count=0,
        forward_gbytes_per_s=strength,
        backward_gbytes_per_s=strength,
        latency_ns=1000.0,
        data_check="passed",
        same_numa=True,
        qualifies=qualifies,
        problems=(),
    )


@st.composite
def pair_verdicts(draw: Any) -> tuple[int, dict[tuple[int, int], PairVerdict], int]:
    count = draw(st.integers(min_value=2, max_value=10))
    # Few distinct strengths make ties, where the two searches could pick different groups.
    strengths = st.sampled_from((10.0, 20.0, 25.0, 40.0, 40.0, 50.0))
    verdicts = {
        (a, b): _verdict(a, b, draw(strengths), draw(st.booleans()) or draw(st.booleans()))
        for a, b in itertools.combinations(range(count), 2)
    }
    max_size = draw(st.integers(min_value=2, max_value=count))
    return count, verdicts, max_size


@settings(max_examples=300, deadline=None)
@given(pair_verdicts())
def test_the_bounded_search_finds_the_exhaustive_group(
    case: tuple[int, dict[tuple[int, int], PairVerdict], int],
) -> None:
    count, verdicts, max_size = case
    exhaustive = best_group_exhaustive(range(count), verdicts, max_size)
    bounded = best_group_bounded(range(count), verdicts, max_size)
    if exhaustive is None:
        assert bounded is None
        return
    assert bounded is not None
    assert bounded.gpus == exhaustive.gpus
    assert bounded.weakest_pair == exhaustive.weakest_pair


def test_a_hidden_clique_among_64_distinct_strengths_is_found() -> None:
    """Every pair qualifies with its own strength except inside one 8-GPU clique whose
    pairs are all stronger than anything else: the best 8-GPU group is that clique."""
    clique = (3, 11, 17, 29, 36, 44, 52, 63)
    verdicts = {}
    for rank, (a, b) in enumerate(itertools.combinations(range(64), 2)):
        inside = a in clique and b in clique
        verdicts[(a, b)] = _verdict(a, b, 1000.0 + rank if inside else 1.0 + rank / 10_000, True)
    group = best_group(range(64), verdicts, 8)
    assert group is not None
    assert group.gpus == clique


def _nvswitch_node(count: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Facts and probe of a ``count``-GPU node whose GPUs all reach each other over NVLink,
    two NUMA nodes, figures that differ pair by pair."""
    half = count // 2
    gpus, probe_gpus, pairs = [], [], []
    for index in range(count):
        uuid = f"GPU-{index:08x}-0000-4000-8000-000000000000"
        gpus.append(
            {
                "index": index,
                "lost": False,
                "uuid": uuid,
                "model": "NVIDIA H200",
                "bus_id": f"0000:{index + 1:02x}:00.0",
                "numa_node": 0 if index < half else 1,
                "mig_mode": "disabled",
            }
        )
        probe_gpus.append(
            {"index": index, "uuid": uuid, "h2d_gbytes_per_s": 55.0, "d2h_gbytes_per_s": 55.0}
        )
    topology = [["NV18" if a != b else "X" for b in range(count)] for a in range(count)]
    read = [["OK" if a != b else "X" for b in range(count)] for a in range(count)]
    for a, b in itertools.permutations(range(count), 2):
        figure = 300.0 + ((a * 7 + b * 13) % 97)
        pairs.append(
            {
                "src": a,
                "dst": b,
                "can_access_peer": True,
                "p2p_enabled": {
                    "unidirectional_gbytes_per_s": figure,
                    "bidirectional_gbytes_per_s": 2 * figure,
                    "latency_ns": 2000,
                },
                "data_check": "passed",
                "error": None,
            }
        )
    facts = {
        "schema_version": 1,
        "kernel": {"cmdline": "ro quiet"},
        "numa": {"node_count": 2},
        "gpus": gpus,
        "topology": topology,
        "p2p": {"read": read, "write": read},
    }
    probe = {"schema_version": 1, "gpus": probe_gpus, "pairs": pairs}
    return facts, probe


def test_a_64_gpu_node_is_planned_into_groups_whose_every_pair_qualifies() -> None:
    facts, probe = _nvswitch_node(64)
    plan = build_plan(facts, probe, {"max_gpus_per_instance": 8})
    instances = plan["instances"]
    assert instances, plan
    assert all(len(instance["gpus"]) == 8 for instance in instances)
    used = [gpu for instance in instances for gpu in instance["gpus"]]
    assert len(used) == len(set(used)) == 64
    for instance in instances:
        nodes = {facts["gpus"][gpu]["numa_node"] for gpu in instance["gpus"]}
        assert nodes == {instance["numa_node"]}
