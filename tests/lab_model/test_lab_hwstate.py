"""State rules: kernel parameters, faults, validation, state.txt."""

from __future__ import annotations

import copy

import pytest
from labmodel_support import load_profile, read_profile_yaml

from lingbot_lab.hwstate import (
    cmdline_params,
    compute_state,
    flatten_state,
    has_pci_noacpi,
    iommu_mode,
    tokenize_cmdline,
)
from lingbot_lab.profile import acs_redirect_ports, validate_profile

NOACPI_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=x ro quiet pci=noacpi"


def test_removing_pci_noacpi_restores_numa_and_p2p():
    profile = load_profile("a6000-noacpi")
    broken = compute_state(profile, NOACPI_CMDLINE)
    fixed = compute_state(profile, NOACPI_CMDLINE.replace(" pci=noacpi", ""))
    assert [g["numa_node"] for g in broken["gpus"]] == [-1, -1]
    assert [g["cpu_list"] for g in broken["gpus"]] == ["0-127", "0-127"]
    assert broken["boot"]["acpi_pci"] is False
    assert broken["pairs"][0]["p2p_status"] == {
        "read": "CNS",
        "write": "CNS",
        "nvlink": "NS",
        "atomics": "CNS",
        "prop": "CNS",
    }
    assert broken["pairs"][0]["p2p"] is None
    assert [g["numa_node"] for g in fixed["gpus"]] == [0, 0]
    assert [g["cpu_list"] for g in fixed["gpus"]] == ["0-31,64-95", "0-31,64-95"]
    assert fixed["pairs"][0]["p2p_status"]["read"] == "OK"
    assert fixed["pairs"][0]["p2p"] == {
        "gbytes_per_s": 21.7,
        "bidir_gbytes_per_s": 39.5,
        "latency_ns": 1610,
    }


@pytest.mark.parametrize(
    ("cmdline", "vendor", "default", "expected"),
    [
        ("ro quiet", "Intel", "off", "off"),
        ("ro quiet", "AMD", "passthrough", "passthrough"),
        ("ro intel_iommu=on", "Intel", "off", "translated"),
        ("ro intel_iommu=on iommu=pt", "Intel", "off", "passthrough"),
        ("ro intel_iommu=on iommu.passthrough=1", "Intel", "off", "passthrough"),
        ("ro intel_iommu=on", "AMD", "passthrough", "passthrough"),  # not the CPU's vendor
        ("ro amd_iommu=on", "AMD", "off", "translated"),
        ("ro amd_iommu=off", "AMD", "translated", "off"),
        ("ro intel_iommu=off", "Intel", "translated", "off"),
        ("ro intel_iommu=off", "AMD", "translated", "translated"),
        ("ro iommu=off", "AMD", "passthrough", "off"),
        ("ro", "AMD", "translated", "translated"),
    ],
)
def test_iommu_mode_rules(cmdline, vendor, default, expected):
    assert iommu_mode(cmdline, vendor, default) == expected


def test_adding_iommu_pt_stops_the_write_drop_and_uses_the_direct_path():
    profile = load_profile("a6000-iommu-acs")
    translated = compute_state(profile, "ro quiet intel_iommu=on")
    passthrough = compute_state(profile, "ro quiet intel_iommu=on iommu=pt")
    assert translated["pairs"][0]["p2p_drops_writes"] is True
    assert translated["pairs"][0]["p2p"]["latency_ns"] == 3100
    assert passthrough["pairs"][0]["p2p_drops_writes"] is False
    assert passthrough["pairs"][0]["p2p"]["gbytes_per_s"] == 17.5
    assert [g["iommu_group"] for g in passthrough["gpus"]] == [4, 5]


SWITCH_P2P = {"gbytes_per_s": 27.4, "bidir_gbytes_per_s": 52.6, "latency_ns": 1080}
ACS_PORT_CONFIGS = [
    {"bdf": "0000:18:00.0", "config_path": "/sys/bus/pci/devices/0000:18:00.0/config"},
    {"bdf": "0000:18:01.0", "config_path": "/sys/bus/pci/devices/0000:18:01.0/config"},
]


def test_the_switch_figures_without_acs_redirect_and_the_ports_that_decide():
    profile = load_profile("a6000-iommu-acs")
    passthrough = compute_state(profile, "ro quiet intel_iommu=on iommu=pt")
    forward, backward = passthrough["pairs"]
    assert forward["p2p"]["gbytes_per_s"] == 17.5  # redirected, as the profile boots
    assert forward["p2p_without_acs_redirect"] == SWITCH_P2P
    assert backward["p2p_without_acs_redirect"] == SWITCH_P2P
    assert forward["acs_redirect_ports"] == ACS_PORT_CONFIGS
    assert backward["acs_redirect_ports"] == ACS_PORT_CONFIGS[::-1]
    lines = flatten_state(passthrough).splitlines()
    for expected in (
        "pair.0.1.p2p_without_acs_redirect.gbytes_per_s 27.4",
        "pair.0.1.p2p_without_acs_redirect.latency_ns 1080",
        "pair.0.1.acs_redirect_ports.count 2",
        "pair.0.1.acs_redirect_ports.1.config_path /sys/bus/pci/devices/0000:18:01.0/config",
    ):
        assert expected in lines


def test_the_translated_figures_win_over_the_switch_figures():
    profile = load_profile("a6000-iommu-acs")
    translated = compute_state(profile, "ro quiet intel_iommu=on")
    pair = translated["pairs"][0]
    assert pair["p2p"]["gbytes_per_s"] == 6.1
    assert pair["p2p_without_acs_redirect"] is None
    assert pair["acs_redirect_ports"] == ACS_PORT_CONFIGS
    assert "pair.0.1.p2p_without_acs_redirect -" in flatten_state(translated).splitlines()
    # No P2P at all: no figures to switch to.
    noacpi = compute_state(profile, "ro quiet intel_iommu=on iommu=pt pci=noacpi")
    assert (noacpi["pairs"][0]["p2p"], noacpi["pairs"][0]["p2p_without_acs_redirect"]) == (
        None,
        None,
    )
    # A translating IOMMU without translated figures falls back to p2p: the switch's
    # figures still apply once nothing redirects.
    raw = read_profile_yaml("a6000-iommu-acs")
    raw["paths"][0]["p2p_iommu_translated"] = None
    fallback = compute_state(validate_profile(raw), "ro quiet intel_iommu=on")
    assert fallback["pairs"][0]["p2p"]["gbytes_per_s"] == 17.5
    assert fallback["pairs"][0]["p2p_without_acs_redirect"] == SWITCH_P2P


def test_acs_redirect_matters_only_at_the_switch_where_the_paths_meet():
    two_switches = load_profile("pcie-4gpu-two-switches")
    bdfs = [gpu["bdf"] for gpu in two_switches["gpus"]]
    assert acs_redirect_ports(two_switches, bdfs[0], bdfs[1]) == ["0000:22:00.0", "0000:22:01.0"]
    assert acs_redirect_ports(two_switches, bdfs[0], bdfs[2]) == []  # different root complexes
    phb = load_profile("a6000-phb")
    assert acs_redirect_ports(phb, *(gpu["bdf"] for gpu in phb["gpus"])) == []
    state = compute_state(phb, "ro")
    assert state["pairs"][0]["acs_redirect_ports"] == []
    assert "pair.0.1.acs_redirect_ports.count 0" in flatten_state(state).splitlines()


def test_translated_without_a_translated_path_falls_back_to_p2p():
    profile = load_profile("a6000-x8")
    state = compute_state(profile, "ro amd_iommu=on")
    assert state["boot"]["iommu_mode"] == "translated"
    assert state["pairs"][0]["p2p"]["gbytes_per_s"] == 13.1
    assert state["pairs"][0]["p2p_drops_writes"] is False


def test_iommu_off_means_no_groups():
    state = compute_state(load_profile("a6000-phb"), "ro iommu=off")
    assert [g["iommu_group"] for g in state["gpus"]] == [None, None]


def test_gpus_behind_a_switch_without_acs_share_a_group():
    state = compute_state(load_profile("pcie-4gpu-two-switches"), "ro")
    assert [g["iommu_group"] for g in state["gpus"]] == [4, 4, 9, 9]


def test_lost_gpu_and_failing_gpu_faults():
    raw = read_profile_yaml("pcie-4gpu-two-switches")
    raw["faults"] = [
        {"kind": "gpu_lost", "gpu": 1},
        {"kind": "device_fails_after_copies", "gpu": 2, "copies": 50},
    ]
    state = compute_state(validate_profile(raw), "ro")
    assert [g["lost"] for g in state["gpus"]] == [False, True, False, False]
    assert [g["fail_after_copies"] for g in state["gpus"]] == [0, 0, 50, 0]
    lost_pair = next(p for p in state["pairs"] if (p["a"], p["b"]) == (0, 1))
    assert set(lost_pair["p2p_status"].values()) == {"U"}
    assert lost_pair["p2p"] is None
    assert next(p for p in state["pairs"] if (p["a"], p["b"]) == (0, 2))["p2p"] is not None


def test_geforce_pairs_are_gns_and_path_without_p2p_is_tns():
    raw = read_profile_yaml("a6000-x8")
    for gpu in raw["gpus"]:
        gpu["brand"] = "GeForce"
    assert compute_state(validate_profile(raw), "ro")["pairs"][0]["p2p_status"]["read"] == "GNS"
    raw = read_profile_yaml("a6000-x8")
    raw["paths"][0]["p2p"] = None
    status = compute_state(validate_profile(raw), "ro")["pairs"][0]["p2p_status"]
    assert (status["read"], status["prop"], status["nvlink"]) == ("TNS", "TNS", "NS")


def test_direct_nvlink_bridge_between_two_gpus():
    raw = read_profile_yaml("a6000-phb")
    raw["gpus"][0]["nvlinks"] = [{"count": 4, "to": 1}]
    raw["gpus"][1]["nvlinks"] = [{"count": 4, "to": 0}]
    state = compute_state(validate_profile(raw), "ro")
    assert [(p["topology"], p["topology_level"], p["nvlink_count"]) for p in state["pairs"]] == [
        ("NV4", 30, 4),
        ("NV4", 30, 4),
    ]
    assert state["pairs"][0]["p2p_status"]["atomics"] == "OK"


def test_deep_switch_tree_is_pxb():
    raw = read_profile_yaml("pcie-4gpu-two-switches")
    # A second switch level below 0000:22:01.0 for GPU 1.
    raw["pcie_ports"][3:3] = []
    raw["pcie_ports"].insert(
        4,
        {
            "bdf": "0000:24:00.0",
            "kind": "switch_upstream",
            "parent": "0000:22:01.0",
            "link": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
        },
    )
    raw["pcie_ports"].insert(
        5,
        {
            "bdf": "0000:25:00.0",
            "kind": "switch_downstream",
            "parent": "0000:24:00.0",
            "link": {"gen": 4, "width": 16, "max_gen": 4, "max_width": 16},
        },
    )
    raw["gpus"][1]["bdf"] = "0000:26:00.0"
    raw["gpus"][1]["parent"] = "0000:25:00.0"
    state = compute_state(validate_profile(raw), "ro")
    pair = next(p for p in state["pairs"] if (p["a"], p["b"]) == (0, 1))
    assert (pair["topology"], pair["topology_level"]) == ("PXB", 20)
    # Peer requests turn around in the upper switch: its downstream ports decide, the
    # lower switch's port 0000:25:00.0 sends them upstream either way.
    assert [port["bdf"] for port in pair["acs_redirect_ports"]] == [
        "0000:22:00.0",
        "0000:22:01.0",
    ]


def test_host_figures_follow_the_narrowest_link_above_the_slot():
    narrow = compute_state(load_profile("pcie-switch-narrow-uplink"), "ro")
    assert [gpu["host_path_share"] for gpu in narrow["gpus"]] == [0.5, 0.5]
    assert narrow["gpus"][0]["host"] == {
        "h2d_gbytes_per_s": 12.45,
        "d2h_gbytes_per_s": 13.15,
        "latency_ns": 9400,
    }
    assert "gpu.1.host.h2d_gbytes_per_s 12.4" in flatten_state(narrow).splitlines()
    # A Gen3 uplink above Gen4 x16 GPUs: 8 GT/s against 16, the same line code.
    raw = read_profile_yaml("pcie-4gpu-two-switches")
    for port in raw["pcie_ports"][:2]:
        port["link"]["gen"] = 3
    state = compute_state(validate_profile(raw), "ro")
    assert [gpu["host_path_share"] for gpu in state["gpus"]] == [0.5, 0.5, 1.0, 1.0]
    assert state["gpus"][0]["host"]["h2d_gbytes_per_s"] == 12.45
    # Links at or above the GPU's own never raise its figures; the slot port is the GPU's.
    healthy = compute_state(load_profile("pcie-4gpu-two-switches"), "ro")
    assert [gpu["host"]["h2d_gbytes_per_s"] for gpu in healthy["gpus"]] == [24.9, 24.8, 24.9, 24.7]
    x8 = compute_state(load_profile("a6000-x8"), "ro")
    assert [gpu["host_path_share"] for gpu in x8["gpus"]] == [1.0, 1.0]


def test_tokenizer_keeps_quoted_values_together():
    line = 'ro  quiet dyndbg="file drivers/pci/* +p"   pci=noacpi,nommconf'
    assert tokenize_cmdline(line) == [
        "ro",
        "quiet",
        'dyndbg="file drivers/pci/* +p"',
        "pci=noacpi,nommconf",
    ]
    assert cmdline_params(line)[2] == ("dyndbg", "file drivers/pci/* +p")
    assert has_pci_noacpi(line)
    assert not has_pci_noacpi("ro pci=nommconf acpi=noirq")


def test_flatten_state_lines():
    state = compute_state(load_profile("a6000-phb"), "BOOT_IMAGE=/boot/vmlinuz-6.1 ro quiet")
    lines = flatten_state(state).splitlines()
    for expected in (
        "schema 1",
        "profile a6000-phb",
        "boot.cmdline BOOT_IMAGE=/boot/vmlinuz-6.1 ro quiet",
        "boot.acpi_pci 1",
        "driver.version 550.54.15",
        "numa_node_count 1",
        "numa_node.0.cpus 0-31",
        "gpu_count 2",
        "gpu.0.uuid GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11",
        "gpu.1.bdf 0000:42:00.0",
        "gpu.0.link.gen_load 4",
        "gpu.0.nvlinks.count 0",
        "gpu.0.lost 0",
        "gpu.0.iommu_group 2",
        "pair_count 2",
        "pair.0.1.p2p.gbytes_per_s 28.4",
        "pair.1.0.p2p_status.read OK",
        "pair.0.1.p2p_drops_writes 0",
        "pair.0.1.host_staged.latency_ns 8800",
    ):
        assert expected in lines
    assert all(len(line.split(" ", 1)) == 2 for line in lines)
    noacpi = flatten_state(compute_state(load_profile("a6000-noacpi"), "ro pci=noacpi"))
    assert "pair.0.1.p2p -" in noacpi.splitlines()
    h100 = flatten_state(compute_state(load_profile("h100-sxm-nvswitch"), "ro")).splitlines()
    assert "gpu.3.nvlinks.count 1" in h100
    assert "gpu.3.nvlinks.0.count 18" in h100
    assert "gpu.3.nvlinks.0.to nvswitch" in h100
    assert "gpu.3.nvlinks_inactive 0" in h100


def _broken(change) -> dict:
    raw = copy.deepcopy(read_profile_yaml("pcie-4gpu-two-switches"))
    change(raw)
    return raw


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p.update(faults=[{"kind": "nvlink_down", "gpu": 1, "links": 2}]),
            "profile pcie-4gpu-two-switches: faults[0].links: 2 is more than the 0 NVLinks of "
            "gpus[1]; fix: give at most that many, or give the GPU its nvlinks",
        ),
        (
            lambda p: p["pcie_ports"][1].update(parent="0000:99:00.0"),
            "profile pcie-4gpu-two-switches: pcie_ports[1].parent: unknown parent "
            "'0000:99:00.0' of 0000:21:00.0; fix: name a host bridge id or a port listed "
            "before this one",
        ),
        (
            lambda p: p["gpus"][1].update(bdf="0000:23:00.0"),
            "profile pcie-4gpu-two-switches: gpus[1].bdf: duplicate bdf 0000:23:00.0; "
            "fix: give every device its own address",
        ),
        (
            lambda p: p["gpus"][2].update(uuid=p["gpus"][0]["uuid"]),
            "profile pcie-4gpu-two-switches: gpus[2].uuid: duplicate uuid "
            "GPU-eec02edc-e67d-41cb-99e3-fa884975840f; fix: make it unique",
        ),
        (
            lambda p: p["paths"][5].update(between=[2, 4]),
            "profile pcie-4gpu-two-switches: paths[5].between: [2, 4] does not name two GPUs "
            "(0..3); fix: write [a, b] with GPU indices",
        ),
        (
            lambda p: p["paths"].pop(),
            "profile pcie-4gpu-two-switches: paths: no path for GPUs [2, 3]; "
            "fix: add a path with between: [2, 3]",
        ),
        (
            lambda p: p["gpus"][0]["link"].update(width=3),
            "profile pcie-4gpu-two-switches: gpus[0].link.width: 3 is not one of "
            "1, 2, 4, 8, 12, 16, 32; fix: pick one",
        ),
        (
            lambda p: p["gpus"][0]["link"].update(max_gen=5),
            "profile pcie-4gpu-two-switches: gpus[0].link: max_gen/max_width above the "
            "GPU's own; fix: lower them",
        ),
        (
            lambda p: p["gpus"][0]["link"].update(max_gen_gpu=5, max_gen=5),
            "profile pcie-4gpu-two-switches: gpus[0].link: max_gen/max_width above what port "
            "0000:22:00.0 can do; fix: lower them or raise the port's max_gen/max_width",
        ),
        (
            lambda p: p["host_bridges"][1].update(numa_node=1),
            "profile pcie-4gpu-two-switches: host_bridges[1].numa_node: 1 is not one of 0; "
            "fix: pick one",
        ),
        (
            lambda p: p["boot"].update(iommu_default=False),
            "profile pcie-4gpu-two-switches: boot.iommu_default: False is not one of off, "
            'translated, passthrough; fix: write "off" in quotes (YAML reads a bare off as false)',
        ),
        (
            lambda p: p["boot"].update(distribution="Ubuntu"),
            "profile pcie-4gpu-two-switches: boot.distribution: 'Ubuntu' is not a distribution "
            "of os_family Debian; fix: write one of debian, ubuntu, or change os_family",
        ),
        (
            lambda p: p.update(os_family="RedHat") or p["boot"].update(distribution="ubuntu"),
            "profile pcie-4gpu-two-switches: boot.distribution: 'ubuntu' is not a distribution "
            "of os_family RedHat; fix: write one of rhel, or change os_family",
        ),
        (
            lambda p: p["pcie_ports"][1]["link"].update(width=8),
            "profile pcie-4gpu-two-switches: pcie_ports[1].link: trained at Gen4 x8 but the "
            "other end of its link, port 0000:20:01.1, at Gen4 x16; fix: give both ends of the "
            "link the same gen and width (max_gen/max_width may differ)",
        ),
        (
            lambda p: p["gpus"].reverse(),
            "profile pcie-4gpu-two-switches: gpus: not in PCI bus order; fix: list GPUs sorted "
            "by bdf (NVML index order)",
        ),
    ],
)
def test_bad_profiles_name_the_field_and_the_fix(change, message):
    with pytest.raises(ValueError) as raised:
        validate_profile(_broken(change))
    assert str(raised.value) == message


def _with_figures_without_redirect(profile_name: str, path: int, **changes) -> dict:
    raw = copy.deepcopy(read_profile_yaml(profile_name))
    figures = {"gbytes_per_s": 25.1, "bidir_gbytes_per_s": 49.2, "latency_ns": 1080}
    raw["paths"][path]["p2p_without_acs_redirect"] = {**figures, **changes}
    return raw


def test_figures_without_acs_redirect_need_a_redirecting_switch_port():
    raw = _with_figures_without_redirect("pcie-4gpu-two-switches", 0)
    with pytest.raises(ValueError) as raised:
        validate_profile(raw)
    assert str(raised.value) == (
        "profile pcie-4gpu-two-switches: paths[0].p2p_without_acs_redirect: no port on the "
        "path of GPUs [0, 1] (0000:22:00.0, 0000:22:01.0) has ACS request_redirect or "
        "completion_redirect, so p2p already is the figure without redirect; fix: remove "
        "p2p_without_acs_redirect, or set request_redirect/completion_redirect in those "
        "ports' acs and make p2p the redirected figure"
    )
    # Completion redirect alone on one of them is enough.
    raw["pcie_ports"][3]["acs"] = {"completion_redirect": True}
    assert validate_profile(raw)["paths"][0]["p2p_without_acs_redirect"]["latency_ns"] == 1080


def test_figures_without_acs_redirect_need_paths_that_meet_in_a_switch():
    with pytest.raises(ValueError) as raised:
        validate_profile(_with_figures_without_redirect("pcie-4gpu-two-switches", 1))
    assert str(raised.value) == (
        "profile pcie-4gpu-two-switches: paths[1].p2p_without_acs_redirect: the paths of GPUs "
        "[0, 2] do not meet in a PCIe switch, so no port's ACS redirect changes their route; "
        "fix: remove p2p_without_acs_redirect (p2p is the figure)"
    )
    with pytest.raises(ValueError, match=r"GPUs \[0, 1\] do not meet in a PCIe switch"):
        validate_profile(_with_figures_without_redirect("a6000-phb", 0))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"latency_ns": None},
            "paths[0].p2p_without_acs_redirect.latency_ns: missing; fix: set latency_ns",
        ),
        (
            {"gbytes_per_s": -25.1},
            "paths[0].p2p_without_acs_redirect: -25.1 is not a positive number; "
            "fix: use a measured value > 0",
        ),
        (
            {"bidir_gbytes_per_s": "49.2"},
            "paths[0].p2p_without_acs_redirect: '49.2' is not a positive number; "
            "fix: use a measured value > 0",
        ),
    ],
)
def test_figures_without_acs_redirect_are_checked_like_the_others(changes, message):
    with pytest.raises(ValueError) as raised:
        validate_profile(_with_figures_without_redirect("a6000-iommu-acs", 0, **changes))
    assert str(raised.value) == f"profile a6000-iommu-acs: {message}"


def test_figures_without_acs_redirect_need_a_p2p_path():
    raw = read_profile_yaml("a6000-iommu-acs")
    raw["paths"][0]["p2p"] = None
    with pytest.raises(ValueError) as raised:
        validate_profile(raw)
    assert str(raised.value) == (
        "profile a6000-iommu-acs: paths[0].p2p_without_acs_redirect: GPUs [0, 1] have no p2p "
        "path; fix: remove it or add p2p"
    )


def test_gpus_out_of_bus_order_are_refused():
    raw = read_profile_yaml("a6000-phb")
    raw["gpus"][0]["bdf"], raw["gpus"][1]["bdf"] = "0000:43:00.0", "0000:42:00.0"
    raw["gpus"][0]["parent"] = "0000:40:03.1"
    with pytest.raises(ValueError, match=r"gpus: not in PCI bus order; fix: list GPUs sorted"):
        validate_profile(raw)


def test_defaults_fill_optional_fields():
    raw = read_profile_yaml("a6000-phb")
    del raw["boot"], raw["driver"], raw["persistenced"], raw["faults"]
    del raw["gpus"][0]["link"]["width"]
    profile = validate_profile(raw)
    assert profile["boot"] == {
        "distribution": "debian",
        "grub_cmdline_linux_default": "quiet",
        "grub_cmdline_linux": "",
        "iommu_default": "passthrough",
        "kernel_version": "6.1.0-18-amd64",
        "root_uuid": "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b",
    }
    assert profile["driver"] == {
        "version": "550.54.15",
        "cuda_driver_version": 12040,
        "gpu_init_ms": 400,
        "context_create_ms": 150,
        "peer_mapping_ms": 40,
    }
    assert profile["gpus"][0]["link"]["width"] == 16
    assert profile["gpus"][0]["link"]["gen_idle"] == 4
    assert profile["pcie_ports"][1]["acs"]["request_redirect"] is False
    assert profile["gpus"][0]["pci_subsystem_device_id"] == 0x1459
    assert profile["persistenced"] == {"args": ""}
    assert profile["paths"][0]["p2p_without_acs_redirect"] is None
    assert "acs" not in raw["pcie_ports"][0] or raw["pcie_ports"][0]["acs"] == {
        "source_validation": True
    }
