import pytest

from lingbot_fleet.parsers import ParseError, parse


def test_new_driver_with_device_and_host_max(sample):
    result = parse("smi-q", sample("smi-q-535-rtx4090-first-gpu.txt"))
    assert result["driver_version"] == "535.154.05"
    assert result["cuda_version"] == "12.2"
    assert result["attached_gpus"] == 8
    assert result["gpus"] == [
        {
            "bus_id": "00000000:01:00.0",
            "bdf": "0000:01:00.0",
            "product_name": "NVIDIA GeForce RTX 4090",
            "uuid": "GPU-370465f5-30e0-6877-b85c-16729f41b90f",
            "persistence_mode": True,
            "mig_mode_current": None,
            "pcie_gen_current": 1,
            "pcie_gen_max": 4,
            "pcie_gen_device_current": 1,
            "pcie_gen_device_max": 4,
            "pcie_gen_host_max": 4,
            "pcie_width_current": 16,
            "pcie_width_max": 16,
            "performance_state": "P8",
            "memory_total_mib": 24564,
            "numa_node": None,
            "pcie_replays": 0,
            "pcie_replay_rollovers": 0,
        }
    ]


def test_old_driver_without_cuda_version_or_mig(sample):
    result = parse("smi-q", sample("smi-q-390-k80-cut.txt"))
    assert (result["driver_version"], result["cuda_version"], result["attached_gpus"]) == (
        "390.77",
        None,
        1,
    )
    gpu = result["gpus"][0]
    assert gpu["bdf"] == "0000:00:1e.0"
    assert gpu["product_name"] == "Tesla K80"
    assert gpu["persistence_mode"] is False
    assert gpu["mig_mode_current"] is None
    assert gpu["pcie_gen_max"] is None and gpu["memory_total_mib"] is None


def test_tab_indented_old_layout_with_lower_case_replays():
    text = (
        "Attached GPUs\t\t\t: 1\nGPU 0000:05:00.0\n\tProduct Name\t\t: Tesla K80\n"
        "\tMIG Mode\n\t\tCurrent\t\t: Enabled\n\tPCI\n\t\tGPU Link Info\n"
        "\t\t\tPCIe Generation\n\t\t\t\tMax\t: 3\n\t\t\t\tCurrent\t: 1\n"
        "\t\t\tLink Width\n\t\t\t\tMax\t: 16x\n\t\t\t\tCurrent\t: 8x\n"
        "\t\tReplays since reset\t: 12\n\tNUMA Node\t: 1\n"
    )
    gpu = parse("smi-q", text)["gpus"][0]
    assert gpu["bdf"] == "0000:05:00.0"
    assert (gpu["pcie_gen_max"], gpu["pcie_gen_current"], gpu["pcie_gen_host_max"]) == (3, 1, None)
    assert (gpu["pcie_width_max"], gpu["pcie_width_current"]) == (16, 8)
    assert gpu["mig_mode_current"] == "Enabled"
    assert gpu["pcie_replays"] == 12
    assert gpu["numa_node"] == 1


def test_text_without_the_nvsmi_banner_or_attached_gpus_is_rejected(sample):
    with pytest.raises(ParseError, match=r"^smi-q: no 'Attached GPUs' field"):
        parse("smi-q", sample("topo-2gpu-rtx5090-tabs-gpu-numa-id.txt"))
