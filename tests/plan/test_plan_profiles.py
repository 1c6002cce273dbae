"""The plan for every lab profile, from facts + probe computed by the lab's hardware model."""

from __future__ import annotations

import json
from typing import Any

import pytest
from plan_support import PROFILE_NAMES, lab_inputs, load_profile

from lingbot_fleet.plan import build_plan

# profile -> (mode, [(instance name, numa node, GPUs in plan order, kv strategy)],
#             substring of mode_reason)
EXPECTED: dict[str, tuple[str, list[tuple[str, int, list[int], str]], str]] = {
    "a6000-phb": (
        "multi_gpu",
        [("main", 0, [0, 1], "p2p_direct")],
        "weakest pair 0-1: 28.4 GB/s",
    ),
    "a6000-already-configured": (
        "multi_gpu",
        [("main", 0, [0, 1], "p2p_direct")],
        "weakest pair 0-1: 28.4 GB/s",
    ),
    "a6000-idle-gen1": (
        "multi_gpu",
        [("main", 0, [0, 1], "p2p_direct")],
        "weakest pair 0-1: 27.9 GB/s",
    ),
    "a6000-persistenced-off": (
        "multi_gpu",
        [("main", 0, [0, 1], "p2p_direct")],
        "weakest pair 0-1: 28.1 GB/s",
    ),
    "a6000-chipset": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "measured 14.1 GB/s (0->1, 1->0), below p2p_min_gbytes_per_s 25 GB/s",
    ),
    "a6000-dual-socket": (
        "single_gpu",
        [("numa0", 0, [0], "host_fallback"), ("numa1", 1, [1], "host_fallback")],
        "GPUs on different NUMA nodes (0 and 1)",
    ),
    "a6000-gen3": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "measured 11.6 GB/s (0->1, 1->0), below p2p_min_gbytes_per_s 25 GB/s",
    ),
    "a6000-x8": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "measured 13.1 GB/s (0->1, 1->0), below p2p_min_gbytes_per_s 25 GB/s",
    ),
    "a6000-iommu-acs": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "the data check failed (0->1, 1->0)",
    ),
    "a6000-noacpi": (
        "none",
        [],
        "pci=noacpi on the running kernel command line",
    ),
    "a6000-ubuntu-vt-handoff": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "0->1 has no peer access (P2P status CNS)",
    ),
    "h100-sxm-nvswitch": (
        "multi_gpu",
        [
            ("numa0", 0, [0, 1, 2, 3], "p2p_direct"),
            ("numa1", 1, [4, 5, 6, 7], "p2p_direct"),
        ],
        "LingBot v0.4.2 refuses multi-GPU inference across NUMA nodes",
    ),
    "rhel8-bls-kernelopts": (
        "none",
        [],
        "pci=noacpi on the running kernel command line",
    ),
    "rhel9-bls-kernel-cmdline": (
        "single_gpu",
        [("numa0-1", 0, [0], "host_fallback"), ("numa0-2", 0, [1], "host_fallback")],
        "measured 9.6 GB/s (0->1, 1->0), below p2p_min_gbytes_per_s 25 GB/s",
    ),
    "pcie-4gpu-two-switches": (
        "multi_gpu",
        [
            ("numa0-1", 0, [0, 1], "p2p_direct"),
            ("numa0-2", 0, [2, 3], "p2p_direct"),
        ],
        "weakest pair 2-3: 25.3 GB/s",
    ),
    "pcie-switch-narrow-uplink": (
        "multi_gpu",
        [("main", 0, [0, 1], "p2p_direct")],
        "weakest pair 0-1: 25.3 GB/s",
    ),
}


def essentials(plan: dict[str, Any]) -> list[tuple[str, int, list[int], str]]:
    return [
        (i["name"], i["numa_node"], i["gpus"], i["kv_cache_strategy"]) for i in plan["instances"]
    ]


def test_every_lab_profile_has_an_expected_plan() -> None:
    assert sorted(EXPECTED) == PROFILE_NAMES


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_profile_plan_essentials(name: str) -> None:
    facts, probe = lab_inputs(name)
    plan = build_plan(facts, probe)
    mode, instances, reason = EXPECTED[name]
    assert plan["mode"] == mode
    assert essentials(plan) == instances
    assert reason in plan["mode_reason"]
    assert plan["provisional"] is False


def test_a6000_phb_instance_in_full() -> None:
    facts, probe = lab_inputs("a6000-phb")
    instance = build_plan(facts, probe)["instances"][0]
    uuids = [gpu["uuid"] for gpu in load_profile("a6000-phb")["gpus"]]
    assert instance["numactl"] == {"cpunodebind": 0, "membind": 0}
    assert instance["environment"] == {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(uuids),
    }
    assert instance["gpus_argument"] == "0,1"
    assert instance["peer_access"] is True
    assert [(p["src"], p["dst"], p["gbytes_per_s"]) for p in instance["peer_access_pairs"]] == [
        (0, 1, 28.4),
        (1, 0, 28.4),
    ]
    assert instance["gpu_weights"] == {"gpu:0": 1.0, "gpu:1": 1.0}
    assert instance["port"] == 8000
    assert instance["config"] == {
        "hardware_profile": {
            "gpu_topology": [
                {
                    "gpu_id": 0,
                    "bus_id": "0000:41:00.0",
                    "peer_links": [
                        {
                            "target_gpu_id": 1,
                            "path_type": "PHB",
                            "bandwidth_gbps": 227.2,
                            "latency_ns": 1320,
                        }
                    ],
                },
                {
                    "gpu_id": 1,
                    "bus_id": "0000:42:00.0",
                    "peer_links": [
                        {
                            "target_gpu_id": 0,
                            "path_type": "PHB",
                            "bandwidth_gbps": 227.2,
                            "latency_ns": 1320,
                        }
                    ],
                },
            ],
            "p2p_threshold_gbps": 200.0,
            "layer_affinity": {"embed_tokens": "gpu:0", "lm_head": "gpu:0", "layers.*": "gpu:1"},
        },
        "load_balancer": {
            "type": "adaptive",
            "config": {"gpu_weights": {"gpu:0": 1.0, "gpu:1": 1.0}},
        },
        "kv_cache_strategy": "p2p_direct",
        "kv_cache_sync_interval_ms": 10,
        "kv_cache_compression": "fp16",
        "debug_mode": False,
    }


def test_single_gpu_config_has_no_peer_links_and_round_robin() -> None:
    facts, probe = lab_inputs("a6000-chipset")
    plan = build_plan(facts, probe)
    config = plan["instances"][0]["config"]
    assert config["hardware_profile"]["gpu_topology"] == [
        {"gpu_id": 0, "bus_id": "0000:01:00.0", "peer_links": []}
    ]
    assert config["load_balancer"] == {
        "type": "round_robin",
        "config": {"gpu_weights": {"gpu:0": 1.0}},
    }
    assert plan["unused_gpus"] == []
    assert plan["instances"][0]["peer_access_pairs"] == []


def test_chipset_primary_is_the_cpu_attached_gpu_by_host_bandwidth() -> None:
    facts, probe = lab_inputs("a6000-chipset")
    plan = build_plan(facts, probe, {"p2p_min_gbytes_per_s": 10})
    instance = plan["instances"][0]
    assert instance["gpus"] == [0, 1]
    assert instance["gpu_weights"] == {"gpu:0": 1.0, "gpu:1": 0.51}
    assert "GPU 0 is the primary: host bandwidth 25.1 GB/s (h2d)" in instance["reasons"]["order"]
    assert instance["config"]["hardware_profile"]["p2p_threshold_gbps"] == 80.0


def test_lower_host_bandwidth_gpu_index_0_is_not_primary() -> None:
    facts, probe = lab_inputs("a6000-x8")
    for gpu in probe["gpus"]:
        gpu["h2d_gbytes_per_s"] = {0: 12.7, 1: 25.2}[gpu["index"]]
    instance = build_plan(facts, probe, {"p2p_min_gbytes_per_s": 10})["instances"][0]
    assert instance["gpus"] == [1, 0]
    assert instance["primary"] == 1
    assert instance["gpu_weights"] == {"gpu:0": 1.0, "gpu:1": 0.5}
    topology = instance["config"]["hardware_profile"]["gpu_topology"]
    assert [entry["bus_id"] for entry in topology] == ["0000:02:00.0", "0000:01:00.0"]


def test_iommu_acs_after_iommu_pt_passes_the_data_check_but_stays_below_threshold() -> None:
    profile = load_profile("a6000-iommu-acs")
    facts, probe = lab_inputs(
        "a6000-iommu-acs",
        f"BOOT_IMAGE=/boot/vmlinuz root=UUID={profile['boot']['root_uuid']} ro quiet "
        "intel_iommu=on iommu=pt",
    )
    plan = build_plan(facts, probe)
    assert plan["mode"] == "single_gpu"
    assert "measured 17.5 GB/s (0->1, 1->0)" in plan["mode_reason"]
    assert "data check failed" not in plan["mode_reason"]
    relaxed = build_plan(facts, probe, {"p2p_min_gbytes_per_s": 15})
    assert essentials(relaxed) == [("main", 0, [0, 1], "p2p_direct")]


def test_iommu_acs_translated_never_gets_p2p_direct_even_with_a_low_threshold() -> None:
    facts, probe = lab_inputs("a6000-iommu-acs")
    plan = build_plan(facts, probe, {"p2p_min_gbytes_per_s": 1})
    assert plan["mode"] == "single_gpu"
    assert all(i["kv_cache_strategy"] == "host_fallback" for i in plan["instances"])


def test_h100_instances_carry_the_numa_reason_and_their_own_ports() -> None:
    facts, probe = lab_inputs("h100-sxm-nvswitch")
    plan = build_plan(facts, probe)
    numa0, numa1 = plan["instances"]
    assert numa0["port"] == 8000 and numa1["port"] == 8001
    assert numa1["numactl"] == {"cpunodebind": 1, "membind": 1}
    assert numa0["gpus_argument"] == "0,1,2,3"
    assert "require_same_numa: true" in numa0["reasons"]["layout"]
    assert (
        "16 cross-node pair(s) reach the threshold (up to 370.0 GB/s over NV18)"
        in (numa1["reasons"]["layout"])
    )
    links = numa0["config"]["hardware_profile"]["gpu_topology"][0]["peer_links"]
    assert [
        (link["target_gpu_id"], link["path_type"], link["bandwidth_gbps"]) for link in links
    ] == [
        (1, "NV18", 2960.0),
        (2, "NV18", 2960.0),
        (3, "NV18", 2960.0),
    ]


def test_h100_without_same_numa_rule_is_one_eight_gpu_instance() -> None:
    facts, probe = lab_inputs("h100-sxm-nvswitch")
    plan = build_plan(facts, probe, {"require_same_numa": False})
    assert essentials(plan) == [("main", 0, [0, 1, 2, 3, 4, 5, 6, 7], "p2p_direct")]
    assert "they span nodes 0, 1" in plan["instances"][0]["reasons"]["numa_node"]


def test_dual_socket_per_numa_layout_runs_one_single_gpu_instance_per_socket() -> None:
    facts, probe = lab_inputs("a6000-dual-socket")
    plan = build_plan(facts, probe, {"instance_layout": "per_numa"})
    assert essentials(plan) == [
        ("numa0", 0, [0], "host_fallback"),
        ("numa1", 1, [1], "host_fallback"),
    ]
    assert plan["instances"][1]["reasons"]["gpus"].startswith(
        "Single GPU: GPU 1 is the only eligible GPU on NUMA node 1"
    )


def test_pcie_4gpu_single_layout_takes_the_first_best_pair() -> None:
    facts, probe = lab_inputs("pcie-4gpu-two-switches")
    plan = build_plan(facts, probe, {"instance_layout": "single"})
    assert essentials(plan) == [("main", 0, [0, 1], "p2p_direct")]
    assert [u["index"] for u in plan["unused_gpus"]] == [2, 3]


def test_pcie_4gpu_lower_threshold_makes_one_four_gpu_instance() -> None:
    facts, probe = lab_inputs("pcie-4gpu-two-switches")
    plan = build_plan(facts, probe, {"p2p_min_gbytes_per_s": 19})
    assert essentials(plan) == [("main", 0, [0, 1, 2, 3], "p2p_direct")]
    assert "weakest pair 0-2: 19.2 GB/s" in plan["mode_reason"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_the_plan_in_force_plans_itself_again(name: str) -> None:
    # A second run on a converged node gets its own plan back, word for word: plan.json,
    # config.yaml and the units stay as they are (no "changed", no restart).
    facts, probe = lab_inputs(name)
    deployed = json.loads(json.dumps(build_plan(facts, probe, {"model_num_layers": 32})))
    assert build_plan(facts, probe, {"model_num_layers": 32}, None, deployed) == deployed
