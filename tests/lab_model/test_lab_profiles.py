"""Every profile: the state it implies, written out per profile."""

from __future__ import annotations

from typing import Any

import pytest
from labmodel_support import PROFILES_DIR, load_profile

from lingbot_lab.grubcfg import profile_cmdline
from lingbot_lab.hwstate import compute_state

ALL_PROFILES = sorted(path.stem for path in PROFILES_DIR.glob("*.yml"))


def boot_state(name: str) -> dict[str, Any]:
    profile = load_profile(name)
    kernel = f"/boot/vmlinuz-{profile['boot']['kernel_version']}"
    return compute_state(profile, f"BOOT_IMAGE={kernel} {profile_cmdline(profile)}")


def pair(state: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    return next(p for p in state["pairs"] if (p["a"], p["b"]) == (a, b))


# name -> iommu mode, GPU numa nodes, (max_gen, width, gen_idle) per GPU,
# {(a, b): (topology, topology_level, read status, p2p GB/s or None, drops writes)}
EXPECTED: dict[str, tuple[str, list[int], list[tuple[int, int, int]], dict[Any, Any]]] = {
    "a6000-phb": (
        "passthrough",
        [0, 0],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PHB", 30, "OK", 28.4, False)},
    ),
    "a6000-already-configured": (
        "passthrough",
        [0, 0],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PHB", 30, "OK", 28.4, False)},
    ),
    "a6000-ubuntu-vt-handoff": (
        "passthrough",
        [-1, -1],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PHB", 30, "CNS", None, False)},
    ),
    "a6000-chipset": (
        "off",
        [0, 0],
        [(4, 16, 4), (4, 8, 4)],
        {(0, 1): ("PHB", 30, "OK", 14.1, False)},
    ),
    "a6000-dual-socket": (
        "passthrough",
        [0, 1],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("SYS", 50, "OK", 11.2, False)},
    ),
    "a6000-x8": (
        "passthrough",
        [0, 0],
        [(4, 16, 4), (4, 8, 4)],
        {(0, 1): ("PHB", 30, "OK", 13.1, False)},
    ),
    "a6000-gen3": (
        "passthrough",
        [0, 0],
        [(3, 16, 3), (3, 16, 3)],
        {(0, 1): ("PHB", 30, "OK", 11.6, False)},
    ),
    "a6000-noacpi": (
        "off",
        [-1, -1],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("NODE", 40, "CNS", None, False)},
    ),
    "a6000-iommu-acs": (
        "translated",
        [0, 0],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PIX", 10, "OK", 6.1, True)},
    ),
    "a6000-idle-gen1": (
        "passthrough",
        [0, 0],
        [(4, 16, 1), (4, 16, 1)],
        {(0, 1): ("PHB", 30, "OK", 27.9, False)},
    ),
    "a6000-persistenced-off": (
        "passthrough",
        [0, 0],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PHB", 30, "OK", 28.1, False)},
    ),
    "h100-sxm-nvswitch": (
        "off",
        [0, 0, 0, 0, 1, 1, 1, 1],
        [(5, 16, 5)] * 8,
        {
            (a, b): ("NV18", 40 if (a < 4) == (b < 4) else 50, "OK", 370.0, False)
            for a in range(8)
            for b in range(8)
            if a < b
        },
    ),
    "rhel8-bls-kernelopts": (
        "off",
        [-1, -1],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("NODE", 40, "CNS", None, False)},
    ),
    "rhel9-bls-kernel-cmdline": (
        "translated",
        [0, 0],
        [(4, 16, 4), (4, 16, 4)],
        {(0, 1): ("PHB", 30, "OK", 9.6, False)},
    ),
    "pcie-4gpu-two-switches": (
        "passthrough",
        [0, 0, 0, 0],
        [(4, 16, 4)] * 4,
        {
            (0, 1): ("PIX", 10, "OK", 25.3, False),
            (0, 2): ("NODE", 40, "OK", 19.2, False),
            (0, 3): ("NODE", 40, "OK", 19.2, False),
            (1, 2): ("NODE", 40, "OK", 19.2, False),
            (1, 3): ("NODE", 40, "OK", 19.2, False),
            (2, 3): ("PIX", 10, "OK", 25.3, False),
        },
    ),
    "pcie-switch-narrow-uplink": (
        "passthrough",
        [0, 0],
        [(4, 16, 4)] * 2,
        {(0, 1): ("PIX", 10, "OK", 25.3, False)},
    ),
}


def test_there_are_exactly_the_sixteen_profiles():
    assert sorted(EXPECTED) == ALL_PROFILES


@pytest.mark.parametrize("name", ALL_PROFILES)
def test_profile_header_names_it_and_says_what_to_find(name):
    text = (PROFILES_DIR / f"{name}.yml").read_text(encoding="utf-8")
    profile = load_profile(name)
    assert profile["name"] == name
    assert text.splitlines()[1].startswith(f"# {name}: ")
    assert "# The toolkit should find:" in text
    assert 20 < len(profile["summary"]) <= 100


@pytest.mark.parametrize("name", ALL_PROFILES)
def test_state_matches_the_profile(name):
    mode, numa_nodes, links, pairs = EXPECTED[name]
    state = boot_state(name)
    assert state["boot"]["iommu_mode"] == mode
    assert [gpu["numa_node"] for gpu in state["gpus"]] == numa_nodes
    got_links = [
        (gpu["link"]["gen_load"], gpu["link"]["width"], gpu["link"]["gen_idle"])
        for gpu in state["gpus"]
    ]
    assert got_links == links
    for (a, b), (topology, level, read, p2p_gbytes, drops) in pairs.items():
        for first, second in ((a, b), (b, a)):
            got = pair(state, first, second)
            p2p = got["p2p"]["gbytes_per_s"] if got["p2p"] else None
            assert (got["topology"], got["topology_level"]) == (topology, level), (first, second)
            assert (got["p2p_status"]["read"], got["p2p_status"]["write"]) == (read, read)
            assert (p2p, got["p2p_drops_writes"]) == (p2p_gbytes, drops)
    gpu_count = len(numa_nodes)
    assert len(state["pairs"]) == gpu_count * (gpu_count - 1)


def test_h100_gpus_are_datacenter_parts_with_nvlink_status():
    state = boot_state("h100-sxm-nvswitch")
    gpu = state["gpus"][0]
    assert gpu["pci_device_id"] == 0x233010DE
    assert gpu["memory_total_bytes"] == 81559 * 1024 * 1024
    assert gpu["cpu_list"] == "0-55,112-167"
    assert state["gpus"][7]["cpu_list"] == "56-111,168-223"
    assert pair(state, 2, 6)["p2p_status"] == {
        "read": "OK",
        "write": "OK",
        "nvlink": "OK",
        "atomics": "OK",
        "prop": "OK",
    }
    assert pair(state, 2, 6)["nvlink_count"] == 18
    assert gpu["host"] == {"h2d_gbytes_per_s": 55.2, "d2h_gbytes_per_s": 55.6, "latency_ns": 8100}


def test_a6000_reference_values():
    state = boot_state("a6000-phb")
    gpu = state["gpus"][0]
    assert gpu["pci_device_id"] == 0x223010DE  # 573575390
    assert gpu["memory_total_bytes"] == 51527024640
    assert gpu["iommu_group"] == 2
    assert state["driver"] == {
        "version": "550.54.15",
        "library_version": "550.54.15",
        "nvml_version": "12.550.54.15",
        "cuda_driver_version": 12040,
        "gpu_init_ms": 400,
        "context_create_ms": 150,
        "peer_mapping_ms": 40,
    }
    assert pair(state, 0, 1)["p2p_status"] == {
        "read": "OK",
        "write": "OK",
        "nvlink": "NS",
        "atomics": "NS",
        "prop": "OK",
    }


def test_persistenced_profile_carries_the_daemon_arguments():
    assert load_profile("a6000-persistenced-off")["persistenced"]["args"] == "--no-persistence-mode"
    assert load_profile("a6000-phb")["persistenced"]["args"] == ""


def test_noacpi_lives_in_grub_cmdline_linux_default():
    boot = load_profile("a6000-noacpi")["boot"]
    assert "pci=noacpi" in boot["grub_cmdline_linux_default"].split()
    assert len(load_profile("a6000-noacpi")["numa_nodes"]) == 2
