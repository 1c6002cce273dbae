"""The audit judges configs against the deployed plan, and a changed plan on its own."""

from __future__ import annotations

import copy
from typing import Any

from lingbot_fleet.audit.evaluate import drift_state, plan_change_findings, plan_changes


def plan(uuids: list[str], *, numa: int = 0, threshold: float = 25.0) -> dict[str, Any]:
    return {
        "instances": [
            {
                "name": "main",
                "gpu_uuids": uuids,
                "numa_node": numa,
                "peer_access": len(uuids) > 1,
                "peer_access_pairs": [[0, 1]] if len(uuids) > 1 else [],
                "kv_cache_strategy": "p2p_direct" if len(uuids) > 1 else "host_fallback",
                "port": 8000,
                "gpu_weights": {"gpu:0": 1.0, "gpu:1": 0.93},
                "peer_access_threshold_gbytes_per_s": threshold,
                "config": {"kv_cache_strategy": "p2p_direct"},
            }
        ],
        "summary": "LingBot on GPUs 0,1",
    }


def test_new_measurements_that_keep_every_decision_are_no_plan_change() -> None:
    deployed = plan(["GPU-a", "GPU-b"])
    fresh = copy.deepcopy(deployed)
    fresh["instances"][0]["gpu_weights"]["gpu:1"] = 0.91
    assert plan_changes(deployed, fresh) == []
    assert plan_change_findings(deployed, fresh) == []


def test_a_lost_gpu_is_a_plan_change_finding_naming_what_moves() -> None:
    deployed = plan(["GPU-a", "GPU-b"])
    fresh = plan(["GPU-a"])
    [finding] = plan_change_findings(deployed, fresh)
    assert finding.code == "PLAN_WOULD_CHANGE"
    assert finding.severity == "warning"
    assert finding.evidence["changes"] == [
        "main.gpu_uuids (2 items, plan 1)",
        "main.kv_cache_strategy",
        "main.peer_access",
        "main.peer_access_pairs (1 items, plan 0)",
    ]


def test_configs_are_compared_with_the_plan_that_deployed_them() -> None:
    deployed = plan(["GPU-a", "GPU-b"])
    text = "kv_cache_strategy: p2p_direct\n"
    lingbot = {"configs": {"main": {"text": text}}, "plan": deployed}
    state = drift_state(lingbot, deployed, {})
    assert state["drifted"] is False
    edited = {"configs": {"main": {"text": "kv_cache_strategy: host_fallback\n"}}}
    assert drift_state(edited, deployed, {})["instances"][0]["status"] == "differs"
