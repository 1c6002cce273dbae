"""Every break of LingBot's contract is refused with one exact error line and exit status."""

from __future__ import annotations

import pytest

NUMA_ERROR = "RuntimeError: Multi-GPU inference requires all GPUs on same NUMA node"


def refusal(fake_node, args: list[str]) -> tuple[int, str]:
    result = fake_node.run_to_exit(args)
    assert result.stdout == "", "nothing is announced on stdout when refused"
    return result.returncode, result.stderr.rstrip().splitlines()[-1]


CONFIG_BREAKS = [
    pytest.param(
        ("kv_cache_compression: fp16\n", "kv_cache_compression: fp16\nkv_cache_mode: fast\n"),
        "line 27: kv_cache_mode: unknown key 'kv_cache_mode'; known keys here: hardware_profile,"
        " load_balancer, kv_cache_strategy, kv_cache_sync_interval_ms, kv_cache_compression,"
        " debug_mode",
        id="unknown-top-level-key",
    ),
    pytest.param(
        ("          latency_ns: 132\n", "          latency_ns: 132\n          latency_us: 1\n"),
        "line 11: hardware_profile.gpu_topology[0].peer_links[0].latency_us: unknown key"
        " 'latency_us'; known keys here: target_gpu_id, path_type, bandwidth_gbps, latency_ns",
        id="unknown-peer-link-key",
    ),
    pytest.param(
        ("debug_mode: true", 'debug_mode: "yes"'),
        "line 27: debug_mode: must be a boolean (true or false), got string 'yes'",
        id="debug-mode-string",
    ),
    pytest.param(
        ("kv_cache_sync_interval_ms: 10", "kv_cache_sync_interval_ms: 2.5"),
        "line 25: kv_cache_sync_interval_ms: must be an integer, got float 2.5",
        id="interval-float",
    ),
    pytest.param(
        ("bandwidth_gbps: 227.2", 'bandwidth_gbps: "fast"'),
        "line 9: hardware_profile.gpu_topology[0].peer_links[0].bandwidth_gbps: must be a"
        " number, got string 'fast'",
        id="bandwidth-string",
    ),
    pytest.param(
        ('"gpu:1": 0.85}', '"gpu:1": -1}'),
        "line 23: load_balancer.config.gpu_weights['gpu:1']: must be > 0, got -1",
        id="negative-weight",
    ),
    pytest.param(
        ("type: adaptive", "type: weighted"),
        "line 21: load_balancer.type: must be one of adaptive, round_robin; got 'weighted'",
        id="balancer-type",
    ),
    pytest.param(
        ("kv_cache_strategy: p2p_direct", "kv_cache_strategy: nccl"),
        "line 24: kv_cache_strategy: must be one of p2p_direct, host_fallback; got 'nccl'",
        id="kv-cache-strategy",
    ),
    pytest.param(
        ("path_type: PHB     #", "path_type: SOC     #"),
        "line 8: hardware_profile.gpu_topology[0].peer_links[0].path_type: 'SOC' is not a"
        " topology word; use one of NV#, PIX, PXB, PHB, NODE, SYS (nvidia-smi topo -m legend);"
        " older drivers print SOC, write SYS",
        id="path-type-soc",
    ),
    pytest.param(
        ("path_type: PHB,", "path_type: PCIe,"),
        "line 14: hardware_profile.gpu_topology[1].peer_links[0].path_type: 'PCIe' is not a"
        " topology word; use one of NV#, PIX, PXB, PHB, NODE, SYS (nvidia-smi topo -m legend)",
        id="path-type-flow",
    ),
    pytest.param(
        ('"layers.*": "gpu:1"', '"layers.*": "cuda:1"'),
        "line 19: hardware_profile.layer_affinity['layers.*']: must name a device as 'gpu:N'"
        " (CUDA ordinal), got 'cuda:1'",
        id="layer-affinity-device",
    ),
    pytest.param(
        ('bus_id: "0000:81:00.0"', 'bus_id: "81:00.0"'),
        "line 5: hardware_profile.gpu_topology[0].bus_id: '81:00.0' is not a PCI bus id like"
        " 0000:81:00.0",
        id="bus-id-form",
    ),
    pytest.param(
        ("    - gpu_id: 1\n", "    - gpu_id: 0\n"),
        "line 14: hardware_profile.gpu_topology[1].peer_links[0].target_gpu_id: gpu 0 cannot"
        " have a peer link to itself",
        id="self-link",
    ),
    pytest.param(
        ("bus_id: '0000:c1:00.0'", "bus_id: '0000:81:00.0'"),
        "line 12: hardware_profile.gpu_topology[1].bus_id: bus_id 0000:81:00.0 listed twice",
        id="duplicate-bus-id",
    ),
    pytest.param(
        ("- target_gpu_id: 1\n", "- target_gpu_id: 2\n"),
        "line 7: hardware_profile.gpu_topology[0].peer_links[0].target_gpu_id: target gpu 2"
        " has no entry in gpu_topology",
        id="link-to-unknown-gpu",
    ),
    pytest.param(
        ("  p2p_threshold_gbps: 200.0", "  p2p_threshold_gbps: &t 200.0"),
        "line 15: anchors are not supported: '&t 200.0'",
        id="yaml-anchor",
    ),
    pytest.param(
        ("load_balancer:\n  type", "load_balancer:\n\ttype"),
        "line 21: tab in indentation; indent with spaces",
        id="yaml-tab",
    ),
    pytest.param(
        ("kv_cache_strategy: p2p_direct\n", "kv_cache_strategy: p2p_direct\n  extra: 1\n"),
        "line 25: unexpected indentation",
        id="yaml-indentation",
    ),
    pytest.param(
        ("debug_mode: true\n", "debug_mode: true\ndebug_mode: false\n"),
        "line 28: duplicate key 'debug_mode'",
        id="yaml-duplicate-key",
    ),
]


@pytest.mark.parametrize(("edit", "expected_suffix"), CONFIG_BREAKS)
def test_config_break_is_refused_with_line(fake_node, good_config, edit, expected_suffix):
    old, new = edit
    assert good_config.count(old) == 1
    fake_node.write_config(good_config.replace(old, new))
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        f"lingbot: error: {fake_node.config_path} {expected_suffix}",
    )


def test_gpu_missing_from_topology_is_refused(fake_node):
    assert refusal(fake_node, fake_node.base_args("0,2")) == (
        2,
        f"lingbot: error: {fake_node.config_path}: --gpus names GPU 2, but"
        " hardware_profile.gpu_topology lists only gpu_id 0, 1; add its entry or fix --gpus",
    )


def test_layer_affinity_on_unused_gpu_is_refused(fake_node):
    assert refusal(fake_node, fake_node.base_args("0")) == (
        2,
        f"lingbot: error: {fake_node.config_path}: hardware_profile.layer_affinity['layers.*']"
        " places layers on gpu:1, which is not in --gpus 0",
    )


def test_adaptive_balancer_without_weight_is_refused(fake_node, good_config):
    fake_node.write_config(good_config.replace(', "gpu:1": 0.85}', "}"))
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        f"lingbot: error: {fake_node.config_path} load_balancer: the adaptive balancer needs a"
        " weight for every GPU in --gpus; gpu_weights has none for gpu:1",
    )


def test_ordinal_beyond_visible_devices_is_refused(fake_node):
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11"
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        "lingbot: error: CUDA device 1 does not exist: CUDA_VISIBLE_DEVICES lists 1 device(s)"
        " (ordinal 0)",
    )


def test_bus_id_not_matching_the_device_is_refused(fake_node):
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "1,0"
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        f"lingbot: error: {fake_node.config_path}: gpu_topology gpu_id 0 has bus_id"
        " 0000:81:00.0, but CUDA device 0 (GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22, driver"
        " index 1) is at 0000:c1:00.0; regenerate the config for this machine or fix"
        " CUDA_VISIBLE_DEVICES",
    )


def test_gpus_on_different_numa_nodes_raise_runtime_error(fake_node):
    fake_node.set_numa_node("0000:c1:00.0", 1)
    result = fake_node.run_to_exit(fake_node.base_args())
    assert result.returncode == 1
    lines = result.stderr.rstrip().splitlines()
    assert lines[-1] == NUMA_ERROR
    assert lines[-2].endswith(" ERROR gpu:1 (0000:c1:00.0) is on NUMA node 1")


def test_single_gpu_ignores_other_numa_nodes(fake_node, good_config, start_server):
    fake_node.set_numa_node("0000:c1:00.0", 1)
    fake_node.write_config(
        good_config.replace('"layers.*": "gpu:1"', '"layers.*": "gpu:0"').replace(
            ', "gpu:1": 0.85}', "}"
        )
    )
    args = fake_node.base_args()
    args[args.index("--gpus") : args.index("--gpus") + 2] = ["--device", "gpu:0"]
    server = start_server(args)
    assert server.stop() == 0


def test_missing_numa_information_is_refused_for_multi_gpu(fake_node):
    (fake_node.root / "sys/bus/pci/devices/0000:c1:00.0/numa_node").unlink()
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        "lingbot: error: cannot read the NUMA node of PCI device 0000:c1:00.0:"
        f" {fake_node.root}/sys/bus/pci/devices/0000:c1:00.0/numa_node: No such file or"
        " directory",
    )


def test_missing_driver_is_a_runtime_failure(fake_node):
    (fake_node.root / "bin" / "nvidia-smi").unlink()
    fake_node.env["PATH"] = str(fake_node.root / "bin")
    returncode, last_line = refusal(fake_node, fake_node.base_args())
    assert returncode == 1
    assert "ERROR cannot list GPUs: NVML" in last_line
    assert last_line.endswith(
        "and nvidia-smi failed (nvidia-smi not found on PATH); is the NVIDIA driver installed?"
    )


@pytest.mark.parametrize(
    ("edit_args", "expected"),
    [
        pytest.param(
            lambda args, node: [*args, "--tensor-parallel", "2"],
            "lingbot: error: unrecognized arguments: --tensor-parallel 2",
            id="unknown-option",
        ),
        pytest.param(
            lambda args, node: [*args, "--peer-access"],
            "lingbot: error: unrecognized arguments: --peer-access",
            id="abbreviated-option",
        ),
        pytest.param(
            lambda args, node: [*args, "--device", "gpu:0"],
            "lingbot: error: argument --device: not allowed with argument --gpus",
            id="gpus-and-device",
        ),
        pytest.param(
            lambda args, node: [*args, "--peer-access-threshold", "fast"],
            "lingbot: error: argument --peer-access-threshold: 'fast' is not a number of GB/s",
            id="threshold-not-number",
        ),
        pytest.param(
            lambda args, node: [*args, "--batch-size", "0"],
            "lingbot: error: argument --batch-size: '0' is not a positive integer",
            id="batch-size-zero",
        ),
        pytest.param(
            lambda args, node: [*args, "--kv-cache-dtype", "int4"],
            "lingbot: error: argument --kv-cache-dtype: 'int4' is not one of bf16, fp16, fp32, fp8",
            id="kv-cache-dtype",
        ),
        pytest.param(
            lambda args, node: [a if a != "0,1" else "0,0" for a in args],
            "lingbot: error: argument --gpus: '0,0' lists GPU 0 more than once",
            id="duplicate-gpu",
        ),
        pytest.param(
            lambda args, node: [a if a != "0,1" else "gpu0" for a in args],
            "lingbot: error: argument --gpus: 'gpu0' is not a comma-separated list of CUDA"
            " ordinals like 0,1",
            id="gpus-form",
        ),
        pytest.param(
            lambda args, node: [a if a != str(node.model_path) else "/nonexistent" for a in args],
            "lingbot: error: --model-path /nonexistent: does not exist",
            id="model-path-missing",
        ),
        pytest.param(
            lambda args, node: [
                a if a != str(node.config_path) else str(node.root / "none.yaml") for a in args
            ],
            None,
            id="config-missing",
        ),
    ],
)
def test_command_line_break_is_refused(fake_node, edit_args, expected):
    if expected is None:
        expected = f"lingbot: error: --config {fake_node.root}/none.yaml: file not found"
    assert refusal(fake_node, edit_args(fake_node.base_args(), fake_node)) == (2, expected)


def test_model_directory_without_config_json_is_refused(fake_node):
    (fake_node.model_path / "config.json").unlink()
    assert refusal(fake_node, fake_node.base_args()) == (
        2,
        f"lingbot: error: --model-path {fake_node.model_path}: no config.json; a model directory"
        " holds config.json",
    )


def test_balancer_config_break_is_refused(fake_node):
    balancer_path = fake_node.write_config(
        "type: adaptive\nconfig:\n  gpu_weights: {gpu:0: 1.0, gpu:1: 1.0}\n  spread: 2\n",
        "balancer.yaml",
    )
    assert refusal(
        fake_node, [*fake_node.base_args(), "--balancer-config", str(balancer_path)]
    ) == (
        2,
        f"lingbot: error: {balancer_path} line 4: config.spread: unknown key 'spread'; known"
        " keys here: gpu_weights",
    )
