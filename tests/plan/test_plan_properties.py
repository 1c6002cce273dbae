"""Property tests: for random facts + probe the plan keeps the planner's promises."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from lingbot_fleet.plan import build_plan

WORDS = ("PIX", "PXB", "PHB", "NODE", "SYS", "NV4", "NV18")


@st.composite
def node_documents(draw: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    count = draw(st.integers(min_value=1, max_value=6))
    gpus = []
    probe_gpus = []
    for index in range(count):
        uuid = f"GPU-{index:08d}-0000-4000-8000-000000000000"
        gpus.append(
            {
                "index": index,
                "lost": draw(st.booleans()) and draw(st.booleans()),
                "uuid": uuid,
                "model": "NVIDIA RTX A6000",
                "bus_id": f"0000:{index + 1:02x}:00.0",
                "numa_node": draw(st.sampled_from((-1, 0, 0, 1, 1))),
                "mig_mode": draw(st.sampled_from(("disabled", "disabled", "enabled"))),
            }
        )
        probe_gpus.append(
            {
                "index": index,
                "uuid": uuid,
                "h2d_gbytes_per_s": draw(st.floats(min_value=1, max_value=60)),
                "d2h_gbytes_per_s": 20.0,
                "error": None,
            }
        )
    topology = [["X"] * count for _ in range(count)]
    read = [["X"] * count for _ in range(count)]
    pairs = []
    for a in range(count):
        for b in range(a + 1, count):
            word = draw(st.sampled_from(WORDS))
            status = draw(st.sampled_from(("OK", "OK", "OK", "CNS")))
            topology[a][b] = topology[b][a] = word
            read[a][b] = read[b][a] = status
            for src, dst in ((a, b), (b, a)):
                access = status == "OK"
                pairs.append(
                    {
                        "src": src,
                        "dst": dst,
                        "can_access_peer": access,
                        "p2p_enabled": {
                            "unidirectional_gbytes_per_s": draw(
                                st.floats(min_value=1, max_value=400)
                            ),
                            "bidirectional_gbytes_per_s": 1.0,
                            "latency_ns": 1000,
                        }
                        if access
                        else None,
                        "data_check": draw(st.sampled_from(("passed", "passed", "failed")))
                        if access
                        else "skipped",
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
    policy = {
        "p2p_min_gbytes_per_s": draw(st.sampled_from((10, 25, 100))),
        "instance_layout": draw(st.sampled_from(("auto", "per_numa", "single"))),
        "max_gpus_per_instance": draw(st.integers(min_value=1, max_value=8)),
    }
    return facts, probe, policy


def measured(probe: dict[str, Any], src: int, dst: int) -> dict[str, Any]:
    return next(p for p in probe["pairs"] if p["src"] == src and p["dst"] == dst)


@settings(max_examples=300, deadline=None)
@given(node_documents())
def test_plan_promises(documents: tuple[dict, dict, dict]) -> None:
    facts, probe, policy = documents
    plan = build_plan(facts, probe, policy)
    numa = {gpu["index"]: gpu["numa_node"] for gpu in facts["gpus"]}
    used: list[int] = []
    for instance in plan["instances"]:
        members = instance["gpus"]
        assert len(set(members)) == len(members)
        assert 1 <= len(members) <= max(1, policy["max_gpus_per_instance"])
        assert numa[instance["primary"]] == instance["numa_node"] >= 0
        assert instance["primary"] == members[0]
        assert {numa[index] for index in members} == {instance["numa_node"]}
        for src in members:
            assert not facts["gpus"][src]["lost"]
            assert facts["gpus"][src]["mig_mode"] != "enabled"
            for dst in members:
                if src == dst:
                    continue
                pair = measured(probe, src, dst)
                assert pair["can_access_peer"]
                assert (
                    pair["p2p_enabled"]["unidirectional_gbytes_per_s"]
                    >= policy["p2p_min_gbytes_per_s"]
                )
                assert pair["data_check"] == "passed"
        if len(members) > 1:
            assert instance["kv_cache_strategy"] == "p2p_direct"
        used += members
    assert len(used) == len(set(used))
    assert sorted(used + [u["index"] for u in plan["unused_gpus"]]) == list(range(len(numa)))


@settings(max_examples=100, deadline=None)
@given(node_documents())
def test_plan_is_deterministic_and_json(documents: tuple[dict, dict, dict]) -> None:
    facts, probe, policy = documents
    first = json.dumps(build_plan(facts, probe, policy), sort_keys=True)
    second = json.dumps(
        build_plan(json.loads(json.dumps(facts)), probe, dict(policy)), sort_keys=True
    )
    assert first == second


@settings(max_examples=100, deadline=None)
@given(node_documents())
def test_provisional_plan_pairs_only_nvlink(documents: tuple[dict, dict, dict]) -> None:
    facts, _, policy = documents
    plan = build_plan(facts, None, policy)
    assert plan["provisional"] is True
    for instance in plan["instances"]:
        assert instance["kv_cache_strategy"] == "host_fallback"
        for src in instance["gpus"]:
            for dst in instance["gpus"]:
                if src != dst:
                    assert facts["topology"][src][dst].startswith("NV")
                    assert facts["p2p"]["read"][src][dst] == "OK"
