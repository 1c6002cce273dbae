"""Captures people paste that are only part of an output: parsed, marked partial."""

import json

import pytest

from lingbot_fleet.parsers import parse
from lingbot_fleet.parsers.cmdline import GRUBENV_NOTE as CMDLINE_GRUBENV_NOTE
from lingbot_fleet.parsers.cmdline import LOG_NOTE
from lingbot_fleet.parsers.grub import GRUBENV_NOTE
from lingbot_fleet.parsers.lspci import FRAGMENT_NOTE as LSPCI_NOTE
from lingbot_fleet.parsers.smi_q import FRAGMENT_NOTES

UNKNOWN_DEVICE = dict.fromkeys(
    (
        "bdf",
        "description",
        "class",
        "class_id",
        "vendor_id",
        "device_id",
        "lnkcap",
        "lnksta",
        "lnkcap2_max_speed_gt_per_s",
        "lnkctl2_target_speed_gt_per_s",
        "acs_cap",
        "acs_ctl",
        "numa_node",
        "iommu_group",
        "kernel_driver",
    )
)
UNKNOWN_GPU = dict.fromkeys(
    (
        "bus_id",
        "bdf",
        "product_name",
        "uuid",
        "persistence_mode",
        "mig_mode_current",
        "pcie_gen_current",
        "pcie_gen_max",
        "pcie_gen_device_current",
        "pcie_gen_device_max",
        "pcie_gen_host_max",
        "pcie_width_current",
        "pcie_width_max",
        "performance_state",
        "memory_total_mib",
        "numa_node",
        "pcie_replays",
        "pcie_replay_rollovers",
    )
)
H100_LINK = {
    "pcie_gen_max": 5,
    "pcie_gen_device_max": 5,
    "pcie_gen_host_max": 5,
    "pcie_width_max": 16,
}
GEN1_X16 = H100_LINK | {
    "pcie_gen_current": 1,
    "pcie_gen_device_current": 1,
    "pcie_width_current": 16,
}
GEN5_X8 = H100_LINK | {"pcie_gen_current": 5, "pcie_gen_device_current": 5, "pcie_width_current": 8}
DMESG_PARAMS = [
    {"name": "root", "value": "UUID=5d3c1f0e-8a4b-4c7d-9e2f-1b6a7c8d9e0f"},
    {"name": "ro", "value": None},
    {"name": "intel_iommu", "value": "on"},
    {"name": "iommu", "value": "pt"},
    {"name": "pci", "value": "noacpi"},
    {"name": "quiet", "value": None},
    {"name": "splash", "value": None},
    {"name": "vt.handoff", "value": "7"},
]
RHEL_PARAMS = [
    {"name": "root", "value": "/dev/mapper/rhel-root"},
    {"name": "ro", "value": None},
    {"name": "crashkernel", "value": "auto"},
    {"name": "resume", "value": "/dev/mapper/rhel-swap"},
    {"name": "rd.lvm.lv", "value": "rhel/root"},
    {"name": "rd.lvm.lv", "value": "rhel/swap"},
    {"name": "rhgb", "value": None},
    {"name": "quiet", "value": None},
]
SAVED_ENTRY = "0c5e9a4f27d84b1e9f3a6d2c8b7e1f40-4.18.0-553.16.1.el8_10.x86_64"
KERNELOPTS = (
    "root=/dev/mapper/rhel-root ro crashkernel=auto resume=/dev/mapper/rhel-swap"
    " rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"
)


def _exact(result: dict, expected: dict) -> None:
    assert result == expected
    assert json.loads(json.dumps(result)) == expected  # JSON-ready as it stands


def test_lspci_grep_of_two_devices_keeps_their_order(sample):
    _exact(
        parse("lspci", sample("lspci-grep-lnkcap-lnksta-switch-and-gpu.txt")),
        {
            "devices": [
                UNKNOWN_DEVICE
                | {
                    "lnkcap": {"speed_gt_per_s": 32.0, "width": 16},
                    "lnksta": {
                        "speed_gt_per_s": 32.0,
                        "width": 16,
                        "speed_downgraded": False,
                        "width_downgraded": False,
                    },
                    "lnkcap2_max_speed_gt_per_s": 32.0,
                },
                UNKNOWN_DEVICE
                | {
                    "lnkcap": {"speed_gt_per_s": 32.0, "width": 16},
                    "lnksta": {
                        "speed_gt_per_s": 2.5,
                        "width": 16,
                        "speed_downgraded": True,
                        "width_downgraded": False,
                    },
                    "lnkcap2_max_speed_gt_per_s": 32.0,
                },
            ],
            "partial": True,
            "note": LSPCI_NOTE,
        },
    )


def test_lspci_grep_lnk_of_one_device_with_lnkctl2(sample):
    _exact(
        parse("lspci", sample("lspci-grep-lnk-one-gpu-no-notes.txt")),
        {
            "devices": [
                UNKNOWN_DEVICE
                | {
                    "lnkcap": {"speed_gt_per_s": 16.0, "width": 16},
                    "lnksta": {
                        "speed_gt_per_s": 16.0,
                        "width": 8,
                        "speed_downgraded": None,
                        "width_downgraded": None,
                    },
                    "lnkcap2_max_speed_gt_per_s": 16.0,
                    "lnkctl2_target_speed_gt_per_s": 16.0,
                }
            ],
            "partial": True,
            "note": LSPCI_NOTE,
        },
    )


def test_lspci_fragment_without_indentation_and_starting_at_lnksta():
    text = (
        "LnkSta:\tSpeed 8GT/s, Width x16\n"
        "LnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported\n"
        "LnkSta:\tSpeed 16GT/s (ok), Width x4 (downgraded)\n"
    )
    assert parse("lspci", text)["devices"] == [
        UNKNOWN_DEVICE
        | {
            "lnksta": {
                "speed_gt_per_s": 8.0,
                "width": 16,
                "speed_downgraded": None,
                "width_downgraded": None,
            }
        },
        UNKNOWN_DEVICE
        | {
            "lnkcap": {"speed_gt_per_s": 16.0, "width": 16},
            "lnksta": {
                "speed_gt_per_s": 16.0,
                "width": 4,
                "speed_downgraded": False,
                "width_downgraded": True,
            },
        },
    ]


@pytest.mark.parametrize("name", ["cmdline-dmesg-timestamp.txt", "cmdline-dmesg-no-timestamp.txt"])
def test_cmdline_from_the_kernel_log_line(sample, name):
    _exact(
        parse("cmdline", sample(name)),
        {
            "boot_image": "/vmlinuz-5.15.0-105-generic",
            "params": DMESG_PARAMS,
            "init_args": [],
            "partial": True,
            "note": LOG_NOTE,
        },
    )


@pytest.mark.parametrize(
    "line",
    [
        "[Mon Jan  6 10:00:00 2025] Kernel command line: ro quiet",
        "Jan 06 10:00:00 gpu01 kernel: Kernel command line: ro quiet",
    ],
)
def test_cmdline_from_dmesg_t_and_journalctl_k(line):
    result = parse("cmdline", line)
    assert (result["params"], result["partial"]) == (
        [{"name": "ro", "value": None}, {"name": "quiet", "value": None}],
        True,
    )


def test_cmdline_from_a_grubenv_block(sample):
    _exact(
        parse("cmdline", sample("grubenv-rhel8-kernelopts.txt")),
        {
            "boot_image": None,
            "params": [
                *RHEL_PARAMS,
                {"name": "intel_iommu", "value": "on"},
                {"name": "iommu", "value": "pt"},
            ],
            "init_args": [],
            "partial": True,
            "note": CMDLINE_GRUBENV_NOTE,
        },
    )


def test_cmdline_from_grub2_editenv_list(sample):
    _exact(
        parse("cmdline", sample("grubenv-rhel8-editenv-list.txt")),
        {
            "boot_image": None,
            "params": RHEL_PARAMS,
            "init_args": [],
            "partial": True,
            "note": CMDLINE_GRUBENV_NOTE,
        },
    )


def test_grub_reads_a_grubenv_block_with_kernelopts_as_the_command_line(sample):
    kernelopts = f"{KERNELOPTS} intel_iommu=on iommu=pt"
    _exact(
        parse("grub", sample("grubenv-rhel8-kernelopts.txt")),
        {
            "variables": {
                "saved_entry": SAVED_ENTRY,
                "kernelopts": kernelopts,
                "boot_success": "0",
            },
            "assignments": [
                {"name": "saved_entry", "value": SAVED_ENTRY, "line": 2},
                {"name": "kernelopts", "value": kernelopts, "line": 3},
                {"name": "boot_success", "value": "0", "line": 4},
            ],
            "unevaluated": [],
            "cmdline_linux": [
                *RHEL_PARAMS,
                {"name": "intel_iommu", "value": "on"},
                {"name": "iommu", "value": "pt"},
            ],
            "cmdline_linux_default": None,
            "partial": True,
            "note": GRUBENV_NOTE,
        },
    )


def test_grub_reads_grub2_editenv_list(sample):
    result = parse("grub", sample("grubenv-rhel8-editenv-list.txt"))
    _exact(
        result,
        {
            "variables": {
                "saved_entry": SAVED_ENTRY,
                "kernelopts": KERNELOPTS,
                "boot_success": "1",
                "boot_indeterminate": "0",
            },
            "assignments": [
                {"name": "saved_entry", "value": SAVED_ENTRY, "line": 1},
                {"name": "kernelopts", "value": KERNELOPTS, "line": 2},
                {"name": "boot_success", "value": "1", "line": 3},
                {"name": "boot_indeterminate", "value": "0", "line": 4},
            ],
            "unevaluated": [],
            "cmdline_linux": RHEL_PARAMS,
            "cmdline_linux_default": None,
            "partial": True,
            "note": GRUBENV_NOTE,
        },
    )


def test_grub_reads_a_grubenv_block_without_kernelopts():
    text = "# GRUB Environment Block\nsaved_entry=gnulinux-advanced-1234\n" + "#" * 40
    result = parse("grub", text)
    assert result["variables"] == {"saved_entry": "gnulinux-advanced-1234"}
    assert (result["cmdline_linux"], result["partial"]) == (None, True)


def test_smi_q_from_the_first_gpu_line(sample):
    gpu = {
        "product_name": "NVIDIA H100 PCIe",
        "persistence_mode": True,
        "mig_mode_current": "Disabled",
        "performance_state": "P0",
        "memory_total_mib": 81559,
        "pcie_replay_rollovers": 0,
    }
    _exact(
        parse("smi-q", sample("smi-q-two-gpus-from-gpu-line.txt")),
        {
            "driver_version": None,
            "cuda_version": None,
            "attached_gpus": None,
            "gpus": [
                UNKNOWN_GPU
                | gpu
                | GEN1_X16
                | {
                    "bus_id": "00000000:81:00.0",
                    "bdf": "0000:81:00.0",
                    "uuid": "GPU-6b1e4f0a-93c2-4d7e-a815-2f9c0b3d7e64",
                    "pcie_replays": 0,
                },
                UNKNOWN_GPU
                | gpu
                | GEN5_X8
                | {
                    "bus_id": "00000000:C1:00.0",
                    "bdf": "0000:c1:00.0",
                    "uuid": "GPU-d40a7c19-5e6b-4f28-9c3d-81e2b6a4f0c5",
                    "pcie_replays": 14,
                },
            ],
            "partial": True,
            "note": FRAGMENT_NOTES["gpu"],
        },
    )


def test_smi_q_from_a_pci_section(sample):
    _exact(
        parse("smi-q", sample("smi-q-pci-section-only.txt")),
        {
            "driver_version": None,
            "cuda_version": None,
            "attached_gpus": None,
            "gpus": [
                UNKNOWN_GPU
                | GEN1_X16
                | {
                    "bus_id": "00000000:81:00.0",
                    "bdf": "0000:81:00.0",
                    "pcie_replays": 0,
                    "pcie_replay_rollovers": 0,
                }
            ],
            "partial": True,
            "note": FRAGMENT_NOTES["pci"],
        },
    )


def test_smi_q_from_grep_of_gpu_link_info_blocks(sample):
    _exact(
        parse("smi-q", sample("smi-q-grep-gpu-link-info.txt")),
        {
            "driver_version": None,
            "cuda_version": None,
            "attached_gpus": None,
            "gpus": [UNKNOWN_GPU | GEN1_X16, UNKNOWN_GPU | GEN5_X8],
            "partial": True,
            "note": FRAGMENT_NOTES["gpu link info"],
        },
    )


def test_smi_q_two_pci_sections_cut_by_grep_and_tab_indented():
    text = (
        "\tPCI\n\t\tBus Id\t\t: 0000:05:00.0\n\t\tGPU Link Info\n\t\t\tLink Width\n"
        "\t\t\t\tMax\t: 16x\n\t\t\t\tCurrent\t: 8x\n--\n"
        "\tPCI\n\t\tBus Id\t\t: 0000:06:00.0\n\t\tReplays since reset\t: 3\n"
    )
    gpus = parse("smi-q", text)["gpus"]
    assert gpus == [
        UNKNOWN_GPU
        | {
            "bus_id": "0000:05:00.0",
            "bdf": "0000:05:00.0",
            "pcie_width_max": 16,
            "pcie_width_current": 8,
        },
        UNKNOWN_GPU | {"bus_id": "0000:06:00.0", "bdf": "0000:06:00.0", "pcie_replays": 3},
    ]


def test_smi_q_with_fewer_gpus_than_attached_is_partial(sample):
    result = parse("smi-q", sample("smi-q-535-rtx4090-first-gpu.txt"))
    assert (result["partial"], result["note"]) == (
        True,
        "the text describes 1 of the 8 attached GPUs (a cut capture, or nvidia-smi -q -i)",
    )


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("lspci", "lspci-vvv-intel-root-port-acs.txt"),
        ("smi-q", "smi-q-390-k80-cut.txt"),
        ("grub", "grub-arch-graphene.txt"),
        ("cmdline", "cmdline-ubuntu-boot-image.txt"),
    ],
)
def test_a_whole_output_is_not_partial(sample, kind, name):
    result = parse(kind, sample(name))
    assert result["partial"] is False
    assert "note" not in result
