"""The P2P probe on lab nodes: figures, data check, faults, budget, saved results."""

from __future__ import annotations

import copy
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from facts_support import load_profile
from probe_support import (
    ProbedNode,
    assert_close,
    assert_path_matches,
    prepare_node,
    probe,
    state_pair,
)

from lingbot_fleet.cuda import CudaDriver, CudaError
from lingbot_fleet.probe import (
    ProbeParameters,
    describe_cuda_error,
    format_cpulist,
    load_saved_probe,
    parse_cpulist,
    parse_pairs,
    run_probe,
    save_probe,
)


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
        # Idle at Gen1 (gen_idle), Gen4 x16 in P0 while the copies run.
        assert entry["link_under_load"] == {"gen": 4, "width": 16, "performance_state": "P0"}
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
        "size_bytes": 64 << 20,
        "repetitions": 5,
        "latency_size_bytes": 4,
        "latency_repetitions": 50,
        "time_budget_s": 45.0,
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


def test_h100_nvswitch_eight_gpus_within_the_budget(tmp_path: Path, lab_env: Any) -> None:
    probed = prepare_node(load_profile("h100-sxm-nvswitch"), tmp_path, lab_env)
    started_s = time.monotonic()
    result = probe(probed)
    wall_s = time.monotonic() - started_s
    print(f"h100-sxm-nvswitch: 56 pairs, default parameters, wall time {wall_s:.1f} s")
    assert result["errors"] == []
    assert result["duration_s"] < result["parameters"]["time_budget_s"]
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
