"""The P2P probe on lab nodes: figures, data check, faults, budget, saved results."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import SMI_COMMAND, load_profile
from probe_support import (
    ProbedNode,
    assert_close,
    assert_path_matches,
    prepare_node,
    probe,
    state_pair,
)

from lingbot_fleet.audit.evaluate import probe_findings, probe_summary
from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu.cuda import CudaDriver, CudaError
from lingbot_fleet.gpu.linkcheck import (
    LinkPolicy,
    check_links,
    judge_links,
    load_from_probe,
    probe_gpu_findings,
)
from lingbot_fleet.gpu.probe import (
    ProbeParameters,
    describe_cuda_error,
    fill_skipped,
    format_cpulist,
    parse_cpulist,
    parse_pairs,
    path_config,
    reuse_reason,
    run_probe,
    save_probe,
    serving_gpus,
)
from lingbot_fleet.gpu.probe_saved import load_saved_probe
from lingbot_fleet.plan import build_plan


def with_faults(name: str, *faults: dict[str, Any]) -> dict[str, Any]:
    profile = copy.deepcopy(load_profile(name))
    profile["faults"] = list(faults)
    return profile


@pytest.fixture
def phb(tmp_path: Path, lab_env: Any) -> ProbedNode:
    return prepare_node(load_profile("a6000-phb"), tmp_path, lab_env)


def test_a6000_phb_figures_match_the_profile(phb: ProbedNode, lab_pynvml: Any) -> None:
    affinity_before = os.sched_getaffinity(0)
    result = probe(phb, lab_pynvml)
    assert os.sched_getaffinity(0) == affinity_before
    assert result["errors"] == []
    assert result["driver"] == {"cuda_driver_version": 12040}
    state = phb.node.state
    for entry, gpu in zip(result["gpus"], state["gpus"], strict=True):
        assert (entry["index"], entry["cuda_ordinal"]) == (gpu["index"], gpu["index"])
        assert (entry["uuid"], entry["bus_id"]) == (gpu["uuid"], gpu["bdf"])
        assert entry["error"] is None
        assert_close(entry["h2d_gbytes_per_s"], gpu["host"]["h2d_gbytes_per_s"])
        assert_close(entry["d2h_gbytes_per_s"], gpu["host"]["d2h_gbytes_per_s"])
        # Idle at Gen1 (gen_idle); Gen4 x16 after half a second of copies, P0 throughout.
        reading = entry["link_under_load"]
        assert reading["load_s"] >= 0.5
        assert {key: value for key, value in reading.items() if key != "load_s"} == {
            "gen": 4,
            "width": 16,
            "performance_state": "P0",
            "pstate_before": "P0",
            "pstate_after": "P0",
        }
        assert entry["skipped"] is None
        binding = entry["numa_binding"]
        assert binding["local_cpus"] == gpu["cpu_list"]
        bound = parse_cpulist(binding["bound_cpus"])
        assert bound and bound <= parse_cpulist(gpu["cpu_list"]) & affinity_before
    assert [(p["src"], p["dst"]) for p in result["pairs"]] == [(0, 1), (1, 0)]
    for pair in result["pairs"]:
        expected = state_pair(phb.node, pair["src"], pair["dst"])
        assert pair["can_access_peer"] is True
        assert pair["data_check"] == "passed"
        assert pair["error"] is None
        assert_path_matches(pair["p2p_enabled"], expected["p2p"])
        assert_path_matches(pair["p2p_disabled"], expected["host_staged"])
    assert_close(result["pairs"][0]["p2p_enabled"]["unidirectional_gbytes_per_s"], 28.4)
    assert result["parameters"] == {
        "size_bytes": 256 << 20,
        "repetitions": 3,
        "copies_per_sample": 1,
        "warmup_copies": 1,
        "latency_size_bytes": 4,
        "latency_repetitions": 50,
        "time_budget_s": 45.0,
        "link_load_s": 0.5,
        "pairs": "all",
    }


def test_translating_iommu_fails_the_data_check(tmp_path: Path, lab_env: Any) -> None:
    probed = prepare_node(load_profile("a6000-iommu-acs"), tmp_path, lab_env)
    result = probe(probed, repetitions=3, latency_repetitions=10)
    assert [pair["data_check"] for pair in result["pairs"]] == ["failed", "failed"]
    for pair in result["pairs"]:
        expected = state_pair(probed.node, pair["src"], pair["dst"])
        assert expected["p2p_drops_writes"] is True
        # While the IOMMU translates, the peer path is the profile's p2p_iommu_translated.
        assert_close(pair["p2p_enabled"]["unidirectional_gbytes_per_s"], 6.1)
        assert_path_matches(pair["p2p_enabled"], expected["p2p"])
        assert pair["error"] is None


def test_pci_noacpi_means_no_peer_access(tmp_path: Path, lab_env: Any) -> None:
    probed = prepare_node(load_profile("a6000-noacpi"), tmp_path, lab_env)
    result = probe(probed, repetitions=3, latency_repetitions=10)
    assert [gpu["numa_node"] for gpu in result["gpus"]] == [None, None]
    for pair in result["pairs"]:
        expected = state_pair(probed.node, pair["src"], pair["dst"])
        assert (pair["can_access_peer"], pair["p2p_enabled"]) == (False, None)
        assert pair["data_check"] == "skipped"
        assert_path_matches(pair["p2p_disabled"], expected["host_staged"])


def test_a_lost_gpu_is_reported_and_the_rest_measured(tmp_path: Path, lab_env: Any) -> None:
    profile = with_faults("pcie-4gpu-two-switches", {"kind": "gpu_lost", "gpu": 2})
    probed = prepare_node(profile, tmp_path, lab_env)
    result = probe(probed, size_bytes=8 << 20, repetitions=3, latency_repetitions=10)
    lost = result["gpus"][2]
    assert lost["error"].startswith(
        f"GPU 2 ({lost['bus_id']}): cuDevicePrimaryCtxRetain failed: "
        "CUDA_ERROR_DEVICE_UNAVAILABLE (46)"
    )
    assert "meaning: the GPU is lost" in lost["error"]
    assert lost["h2d_gbytes_per_s"] is None
    assert [gpu["error"] for i, gpu in enumerate(result["gpus"]) if i != 2] == [None] * 3
    assert len(result["pairs"]) == 12
    for pair in result["pairs"]:
        if 2 in (pair["src"], pair["dst"]):
            assert pair["error"] == (
                f"pair {pair['src']}->{pair['dst']} not measured: GPU 2 ({lost['bus_id']}) "
                "could not be used (see gpus[2].error)"
            )
            assert pair["p2p_disabled"] is None
        else:
            assert pair["error"] is None
            expected = state_pair(probed.node, pair["src"], pair["dst"])
            assert_path_matches(pair["p2p_disabled"], expected["host_staged"])


def test_a_gpu_failing_mid_probe_is_reported_and_the_rest_measured(
    tmp_path: Path, lab_env: Any
) -> None:
    fault = {"kind": "device_fails_after_copies", "gpu": 1, "copies": 40}
    probed = prepare_node(with_faults("pcie-4gpu-two-switches", fault), tmp_path, lab_env)
    result = probe(probed, size_bytes=8 << 20, repetitions=3, latency_repetitions=10)
    failed = result["gpus"][1]
    assert failed["h2d_gbytes_per_s"] is not None  # measured before it failed
    assert failed["error"].startswith(
        f"GPU 1 ({failed['bus_id']}) stopped working during the probe: cuMemsetD8_v2 failed: "
        "CUDA_ERROR_LAUNCH_FAILED (719): unspecified launch failure; meaning: "
    )
    with_gpu_1 = [p for p in result["pairs"] if 1 in (p["src"], p["dst"])]
    first_failure = with_gpu_1[0]
    assert first_failure["error"].startswith("pair 0->1: cuMemcpyPeerAsync failed: ")
    assert "CUDA_ERROR_LAUNCH_FAILED" in first_failure["error"]
    assert all(p["error"].endswith("(see gpus[1].error)") for p in with_gpu_1[1:])
    others = [p for p in result["pairs"] if 1 not in (p["src"], p["dst"])]
    assert len(others) == 6
    for pair in others:
        assert pair["error"] is None
        expected = state_pair(probed.node, pair["src"], pair["dst"])
        assert_path_matches(pair["p2p_enabled"], expected["p2p"])


def test_h100_nvswitch_eight_gpus_every_pair_measured(tmp_path: Path, lab_env: Any) -> None:
    """All 56 ordered pairs of 8 GPUs with the default figure parameters. The budget is lifted
    here so a loaded test machine cannot cut the probe short: the budget mechanism has its own
    test below, and the probe's wall time on this profile is a benchmark's figure."""
    probed = prepare_node(load_profile("h100-sxm-nvswitch"), tmp_path, lab_env)
    started_s = time.monotonic()
    result = probe(probed, time_budget_s=3600.0)
    wall_s = time.monotonic() - started_s
    print(f"h100-sxm-nvswitch: 56 pairs, default parameters, wall time {wall_s:.1f} s")
    assert result["errors"] == []
    assert len(result["pairs"]) == 56
    for pair in result["pairs"]:
        expected = state_pair(probed.node, pair["src"], pair["dst"])
        assert pair["data_check"] == "passed"
        assert_path_matches(pair["p2p_enabled"], expected["p2p"])


def test_the_time_budget_stops_further_pairs(phb: ProbedNode) -> None:
    ticks = iter(range(0, 1000, 10))
    result = run_probe(
        phb.facts,
        ProbeParameters(repetitions=1, latency_repetitions=1, time_budget_s=15.0),
        cuda_library=phb.cuda_library,
        clock=lambda: float(next(ticks)),
    )
    assert [(p["src"], p["dst"]) for p in result["pairs"]] == [(0, 1)]
    assert result["errors"] == [
        "time budget of 15 s exceeded after 20.0 s: 1 pair(s) not measured (1->0); raise "
        "time_budget_s, lower size_mib or repetitions, or probe fewer pairs"
    ]


def test_chosen_pairs_only_and_unknown_gpus_named(phb: ProbedNode) -> None:
    result = probe(phb, pairs=((1, 0), (0, 5)), repetitions=1, latency_repetitions=1)
    assert [(p["src"], p["dst"]) for p in result["pairs"]] == [(1, 0)]
    assert result["parameters"]["pairs"] == [[1, 0], [0, 5]]
    assert result["errors"] == [
        "pair 0->5 asked for, but the node has no GPU 5 (GPU indices: [0, 1])"
    ]


def test_without_libcuda_every_gpu_says_why(phb: ProbedNode) -> None:
    result = run_probe(phb.facts, ProbeParameters(), cuda_library="/nonexistent/libcuda.so.1")
    assert result["errors"][0].startswith(
        "the CUDA driver: dlopen failed: LIBRARY_NOT_FOUND (-1): /nonexistent/libcuda.so.1"
    )
    assert result["errors"][0].endswith(
        "meaning: the NVIDIA driver's libcuda.so.1 could not be loaded; install the driver's "
        "user-space libraries"
    )
    assert [gpu["error"] for gpu in result["gpus"]] == [
        "GPU 0 (0000:41:00.0) not measured: the CUDA driver could not be used",
        "GPU 1 (0000:42:00.0) not measured: the CUDA driver could not be used",
    ]
    assert result["pairs"] == []


def test_bad_parameters_are_reported_without_measuring(phb: ProbedNode) -> None:
    result = run_probe(phb.facts, ProbeParameters(repetitions=0, pairs=((1, 1),)))
    assert result["errors"] == [
        "repetitions must be at least 1, not 0",
        "pair 1->1: a pair needs two different GPUs",
    ]
    assert result["pairs"] == []


def test_cuda_binding_reads_uuid_version_and_peer_access(phb: ProbedNode) -> None:
    driver = CudaDriver(phb.cuda_library)
    assert driver.driver_version() == 12040
    assert driver.uuid(driver.device(1)) == phb.node.state["gpus"][1]["uuid"]
    assert driver.can_access_peer(0, 1) is True
    context = driver.retain_primary_context(0)
    driver.set_current(context)
    with pytest.raises(CudaError, match=r"^cuCtxEnablePeerAccess failed: CUDA_ERROR_INVALID_"):
        driver.enable_peer_access(0)
    driver.release_primary_context(0)


def test_describe_cuda_error_names_subject_call_and_meaning() -> None:
    error = CudaError("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory")
    assert describe_cuda_error("GPU 3 (0000:c1:00.0)", error) == (
        "GPU 3 (0000:c1:00.0): cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of "
        "memory; meaning: not enough free GPU or pinned host memory for the probe's buffers; "
        "lower size_mib or stop what uses the GPU"
    )


def test_parse_pairs_and_cpulists() -> None:
    assert parse_pairs("all") is None
    assert parse_pairs([[0, 1], "1-0"]) == ((0, 1), (1, 0))
    with pytest.raises(ValueError, match=r"^pairs: \[0\] is not a GPU pair"):
        parse_pairs([[0]])
    assert parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpulist({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"


def test_save_keeps_the_newest_copies_atomically(tmp_path: Path) -> None:
    save_dir = tmp_path / "probe"
    for second in range(4):
        document = {"schema_version": 1, "timestamp": f"2026-11-30T22:55:0{second}Z"}
        saved = save_probe(document, save_dir, keep=2)
    assert saved["latest"] == str(save_dir / "latest.json")
    assert saved["copy"] == str(save_dir / "probe-20261130T225503Z.json")
    assert saved["pruned"] == [str(save_dir / "probe-20261130T225501Z.json")]
    assert sorted(path.name for path in save_dir.iterdir()) == [
        "latest.json",
        "probe-20261130T225502Z.json",
        "probe-20261130T225503Z.json",
    ]
    assert load_saved_probe(save_dir) == document
    assert json.loads((save_dir / "latest.json").read_text())["timestamp"].endswith("03Z")
    assert load_saved_probe(tmp_path / "nothing") is None


def test_peer_access_already_enabled_is_success_and_stays_on(phb: ProbedNode) -> None:
    """Another user of the process enabled peer access first: cuCtxEnablePeerAccess says
    CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED (704); the pair is measured with peer access,
    and the other user's access is still on afterwards."""
    other = CudaDriver(phb.cuda_library)  # the same library: the same driver state
    contexts = [other.retain_primary_context(device) for device in (0, 1)]
    for this, peer in ((0, 1), (1, 0)):
        other.set_current(contexts[this])
        assert other.enable_peer_access(contexts[peer]) is True
    assert other.enable_peer_access(contexts[0]) is False  # 704, not an error
    result = probe(phb, repetitions=1, latency_repetitions=1)
    for pair in result["pairs"]:
        assert pair["error"] is None
        assert pair["data_check"] == "passed"
        assert_close(pair["p2p_enabled"]["unidirectional_gbytes_per_s"], 28.4)
    for this, peer in ((0, 1), (1, 0)):
        other.set_current(contexts[this])
        other.disable_peer_access(contexts[peer])  # still on: no PEER_ACCESS_NOT_ENABLED
    for device in (0, 1):
        other.release_primary_context(device)


def test_the_link_is_read_after_a_sustained_load(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """The idle-gen1 link trains up after 250 ms of copies: the probe's reading after its
    0.5 s load sees Gen4 in P0 at both ends; a 50 ms load still sees Gen1, which the judge
    leaves indeterminate instead of failing."""
    probed = prepare_node(load_profile("a6000-idle-gen1"), tmp_path, lab_env)
    facts = gather_facts(probed.node.root, use_nvml=False, smi_command=SMI_COMMAND)
    sustained = probe(probed, lab_pynvml, size_bytes=8 << 20, repetitions=1, pairs=())
    assert [gpu["link_under_load"]["gen"] for gpu in sustained["gpus"]] == [4, 4]
    assert all(gpu["link_under_load"]["load_s"] >= 0.5 for gpu in sustained["gpus"])
    assert check_links(facts, LinkPolicy(), load_from_probe(sustained)) == []
    for index in (0, 1):  # let the links fall back to Gen1
        (probed.node.lab_root / "run" / "lingbot-lab" / "busy" / str(index)).unlink()
    short = probe(probed, lab_pynvml, size_bytes=8 << 20, repetitions=1, pairs=(), link_load_s=0.05)
    assert [gpu["link_under_load"]["gen"] for gpu in short["gpus"]] == [1, 1]
    findings = check_links(facts, LinkPolicy(), load_from_probe(short))
    assert [(f.code, f.severity) for f in findings] == [("PCIE_GEN_INDETERMINATE", "info")] * 2


def test_gpus_left_out_run_no_copies(phb: ProbedNode) -> None:
    uuid = phb.node.state["gpus"][1]["uuid"]
    result = probe(phb, repetitions=1, latency_repetitions=1, skip={uuid: "serves LingBot"})
    left_out = result["gpus"][1]
    assert (left_out["skipped"], left_out["error"], left_out["h2d_gbytes_per_s"]) == (
        "serves LingBot",
        None,
        None,
    )
    assert result["gpus"][0]["h2d_gbytes_per_s"] is not None
    busy = phb.node.lab_root / "run" / "lingbot-lab" / "busy"
    assert (busy / "0").exists() and not (busy / "1").exists()
    assert [(p["skipped"], p["error"], p["p2p_disabled"]) for p in result["pairs"]] == [
        ("GPU 1 (0000:42:00.0) is left out: serves LingBot", None, None)
    ] * 2
    assert result["errors"] == []


def test_fill_skipped_takes_left_out_entries_from_the_saved_probe() -> None:
    saved = {
        "timestamp": "2026-11-30T22:55:00Z",
        "gpus": [{"index": 0, "uuid": "A", "h2d_gbytes_per_s": 24.0}, {"index": 1, "uuid": "B"}],
        "pairs": [{"src": 0, "dst": 1, "p2p_enabled": {"unidirectional_gbytes_per_s": 28.0}}],
    }
    fresh = {
        "timestamp": "2026-12-01T08:00:00Z",
        "gpus": [
            {"index": 0, "uuid": "A", "skipped": "serves LingBot"},
            {"index": 1, "uuid": "B", "h2d_gbytes_per_s": 25.0, "skipped": None},
        ],
        "pairs": [{"src": 0, "dst": 1, "skipped": "GPU 0 is left out"}],
    }
    filled = fill_skipped(fresh, saved)
    assert filled["gpus"][0] == {
        "index": 0,
        "uuid": "A",
        "h2d_gbytes_per_s": 24.0,
        "from_probe": "2026-11-30T22:55:00Z",
    }
    assert filled["gpus"][1] is fresh["gpus"][1]
    assert filled["pairs"][0]["p2p_enabled"] == {"unidirectional_gbytes_per_s": 28.0}
    other_gpus = {**saved, "gpus": [{"index": 0, "uuid": "C"}, {"index": 1, "uuid": "B"}]}
    assert fill_skipped(fresh, other_gpus) is fresh
    assert fill_skipped(fresh, None) is fresh


def test_serving_gpus_come_from_the_plan() -> None:
    plan = {
        "instances": [
            {"name": "lingbot-0", "gpu_uuids": ["GPU-a", "GPU-b"], "bus_ids": ["0000:41:00.0"]}
        ]
    }
    why = "serves LingBot (instance lingbot-0 of /etc/lingbot/plan.json)"
    assert serving_gpus(plan, "/etc/lingbot/plan.json") == {
        "GPU-a": why,
        "GPU-b": why,
        "0000:41:00.0": why,
    }
    assert serving_gpus(None, "/etc/lingbot/plan.json") == {}


def test_a_gpu_that_stops_answering_is_a_critical_finding_the_planner_avoids(
    tmp_path: Path, lab_env: Any
) -> None:
    fault = {"kind": "device_fails_after_copies", "gpu": 1, "copies": 40}
    probed = prepare_node(with_faults("pcie-4gpu-two-switches", fault), tmp_path, lab_env)
    result = probe(probed, size_bytes=8 << 20, repetitions=3, latency_repetitions=10)
    bus_id = result["gpus"][1]["bus_id"]
    # The audit: the GPU is named, critical; the pairs it broke stay a warning.
    findings = probe_findings(probe_summary(result, "fresh"), result, probed.facts)
    assert [(f.code, f.severity, f.subject) for f in findings] == [
        ("PROBE_GPU_FAILED", "critical", bus_id),
        ("PROBE_ERRORS", "warning", "node"),
    ]
    assert "stopped working during the probe" in findings[0].evidence["error"]
    # The deploy path: gpu_checks' judgement carries it to the planner.
    judged, failure = judge_links(probed.facts, {}, probe=result)
    assert [(f["code"], f["subject"]) for f in judged["findings"]] == [("PROBE_GPU_FAILED", bus_id)]
    assert failure is not None and failure.startswith("1 finding(s) at or above error")
    plan = build_plan(probed.facts, result, {}, judged["findings"])
    used = {gpu for instance in plan["instances"] for gpu in instance["gpus"]}
    assert used and 1 not in used
    assert not next(gpu for gpu in plan["gpus"] if gpu["index"] == 1)["eligible"]


def test_a_gpu_the_driver_refuses_is_an_error_finding(tmp_path: Path, lab_env: Any) -> None:
    probed = prepare_node(load_profile("a6000-phb"), tmp_path, lab_env)
    result = probe(probed, size_bytes=1 << 40, repetitions=1, latency_repetitions=1)
    assert all("CUDA_ERROR_OUT_OF_MEMORY" in gpu["error"] for gpu in result["gpus"])
    findings = probe_gpu_findings(result, probed.facts)
    assert [(f.code, f.severity, f.subject) for f in findings] == [
        ("PROBE_GPU_FAILED", "error", "0000:41:00.0"),
        ("PROBE_GPU_FAILED", "error", "0000:42:00.0"),
    ]


def test_a_saved_probe_of_other_parameters_is_not_reused(phb: ProbedNode) -> None:
    saved = {
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "gpus": [{"uuid": gpu["uuid"]} for gpu in phb.facts["gpus"]],
        "parameters": ProbeParameters().document(),
        "path_config": path_config(phb.facts),
    }
    now_s = time.time() + 60
    assert reuse_reason(saved, phb.facts, 86400, now_s, ProbeParameters()) is not None
    assert (
        reuse_reason(saved, phb.facts, 86400, now_s, ProbeParameters(size_bytes=64 << 20)) is None
    )
    older = {**saved, "parameters": {"size_bytes": 64 << 20, "repetitions": 5}}
    assert reuse_reason(older, phb.facts, 86400, now_s, ProbeParameters()) is None
    assert reuse_reason(older, phb.facts, 86400, now_s) is not None


def test_a_narrow_switch_uplink_halves_host_copies_and_is_named(
    tmp_path: Path, lab_env: Any, lab_pynvml: Any
) -> None:
    """Both GPUs' own links are Gen4 x16; the switch uplink above them trained at x8. The
    probe measures half the host bandwidth; the judge names the uplink's lower end and
    each GPU's figures against the floor of a Gen4 x16 path."""
    probed = prepare_node(load_profile("pcie-switch-narrow-uplink"), tmp_path, lab_env)
    result = probe(probed, lab_pynvml, size_bytes=32 << 20, repetitions=1, pairs=())
    for entry, gpu in zip(result["gpus"], probed.node.state["gpus"], strict=True):
        assert gpu["host_path_share"] == 0.5
        assert_close(entry["h2d_gbytes_per_s"], gpu["host"]["h2d_gbytes_per_s"])
        assert entry["h2d_gbytes_per_s"] < 12.7
    findings = check_links(probed.facts, LinkPolicy(), load_from_probe(result))
    assert [(f.code, f.severity, f.subject) for f in findings] == [
        ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "error", "0000:43:00.0"),
        ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "error", "0000:44:00.0"),
        ("PCIE_LINK_TRAINED_BELOW_CAPABILITY", "error", "0000:41:00.0"),
    ]
    bandwidth = findings[0]
    assert bandwidth.evidence["floor_gbytes_per_s"] == 23.6
    assert (bandwidth.evidence["path_max_gen"], bandwidth.evidence["path_max_width"]) == (4, 16)
    assert bandwidth.evidence["narrowest_link"]["device"] == "0000:41:00.0"
    assert "switch upstream 0000:41:00.0 - root port 0000:40:01.1 trained at x8" in (
        bandwidth.message
    )
    # Figures of copies under 32 MiB are not judged: latency weighs on them.
    small = {**result, "parameters": {**result["parameters"], "size_bytes": 8 << 20}}
    assert [f.code for f in check_links(probed.facts, LinkPolicy(), load_from_probe(small))] == [
        "PCIE_LINK_TRAINED_BELOW_CAPABILITY"
    ]
