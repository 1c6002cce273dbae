"""lingbot-lab-firmware --no-mount end to end on a temp node root, across 'reboots'."""

from __future__ import annotations

import json
import os
from pathlib import Path

from labmodel_support import read_profile_yaml, run_tool

KERNEL = "6.1.0-18-amd64"
UUID = "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b"


def install_profile(root: Path, name: str) -> None:
    path = root / "opt/lingbot-lab/profile.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(read_profile_yaml(name)), encoding="utf-8")


def boot(root: Path) -> dict:
    result = run_tool("lingbot-lab-firmware", root, "--no-mount")
    assert result.returncode == 0, result.stderr
    return json.loads((root / "run/lingbot-lab/state.json").read_text(encoding="utf-8"))


def test_first_boot_installs_grub_and_removing_noacpi_takes_a_reboot(tmp_path):
    install_profile(tmp_path, "a6000-noacpi")
    lab = tmp_path / "run/lingbot-lab"
    state = boot(tmp_path)
    expected_cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro quiet pci=noacpi"
    assert (lab / "cmdline").read_text(encoding="ascii") == expected_cmdline + "\n"
    assert state["boot"]["cmdline"] == expected_cmdline
    assert [g["numa_node"] for g in state["gpus"]] == [-1, -1]
    assert "pair.0.1.p2p_status.read CNS" in (lab / "state.txt").read_text().splitlines()
    default_grub = tmp_path / "etc/default/grub"
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"' in default_grub.read_text().splitlines()
    assert (tmp_path / "boot/grub/grub.cfg").is_file()
    gpu_link = lab / "sys/bus/pci/devices/0000:18:00.0"
    assert os.readlink(gpu_link).startswith(str(lab / "sys/devices/pci0000:17/"))
    assert (Path(os.path.realpath(gpu_link)) / "numa_node").read_text() == "-1\n"
    assert sorted(os.listdir(lab)) == [
        "boot_id",
        "busy",
        "cmdline",
        "driver-version",
        "kmsg",
        "persistence",
        "proc-driver",
        "random",
        "state.json",
        "state.txt",
        "sys",
    ]
    kernel_log = (lab / "kmsg").read_text().splitlines()
    assert kernel_log[0].startswith("6,0,")
    assert kernel_log[0].endswith(f";Linux version {KERNEL} (lingbot lab) #1 SMP")
    assert kernel_log[1].endswith(";NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15")
    first_boot_id = (lab / "boot_id").read_text()
    assert (lab / "random/boot_id").read_text() == first_boot_id

    # The operator fixes the grub file but does not regenerate grub.cfg: nothing changes.
    default_grub.write_text(default_grub.read_text().replace(" pci=noacpi", ""))
    assert boot(tmp_path)["boot"]["acpi_pci"] is False
    # update-grub, then reboot: the running kernel no longer has pci=noacpi.
    assert run_tool("update-grub", tmp_path).returncode == 0
    state = boot(tmp_path)
    assert (
        state["boot"]["cmdline"] == f"BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro quiet"
    )
    assert [g["numa_node"] for g in state["gpus"]] == [0, 0]
    assert state["pairs"][0]["p2p_status"]["read"] == "OK"
    assert (Path(os.path.realpath(gpu_link)) / "numa_node").read_text() == "0\n"
    assert (lab / "boot_id").read_text() != first_boot_id
    assert len((lab / "boot_id").read_text().strip()) == 36


def test_redhat_profile_boots_from_bls_and_grubby_edits_apply_after_reboot(tmp_path):
    install_profile(tmp_path, "h100-sxm-nvswitch")
    state = boot(tmp_path)
    assert state["boot"]["iommu_mode"] == "off"
    assert not (tmp_path / "boot/grub/grub.cfg").exists()
    result = run_tool("grubby", tmp_path, "--update-kernel=ALL", "--args=intel_iommu=on iommu=pt")
    assert result.returncode == 0, result.stderr
    state = boot(tmp_path)
    assert state["boot"]["iommu_mode"] == "passthrough"
    assert state["boot"]["cmdline"].endswith(" rhgb quiet intel_iommu=on iommu=pt")
    groups = tmp_path / "run/lingbot-lab/sys/kernel/iommu_groups"
    assert len(os.listdir(groups)) == 32  # 8 x (root port, switch up, switch down, GPU)


def test_bad_profile_fails_with_the_validation_message(tmp_path):
    install_profile(tmp_path, "a6000-phb")
    path = tmp_path / "opt/lingbot-lab/profile.json"
    raw = json.loads(path.read_text())
    raw["gpus"][1]["parent"] = "0000:40:07.1"
    path.write_text(json.dumps(raw))
    result = run_tool("lingbot-lab-firmware", tmp_path, "--no-mount")
    assert result.returncode == 1
    assert result.stderr == (
        "lingbot-lab-firmware: profile a6000-phb: gpus[1].parent: unknown parent "
        "'0000:40:07.1' of 0000:42:00.0; fix: name a port's bdf\n"
    )


def test_a_boot_into_a_kernel_without_the_nvidia_module_has_no_driver(tmp_path):
    """The installation builds the module for its kernel (as the driver's DKMS package
    does); a newer kernel installed without one becomes grub's default, and its boot has
    the GPUs on the bus and no driver, until the module is built for it."""
    install_profile(tmp_path, "a6000-phb")
    lab = tmp_path / "run/lingbot-lab"
    boot(tmp_path)
    module = tmp_path / f"lib/modules/{KERNEL}/updates/dkms/nvidia-current.ko"
    assert module.is_file()
    newer = "6.1.0-99-amd64"
    (tmp_path / f"boot/vmlinuz-{newer}").write_bytes(b"")
    assert run_tool("update-grub", tmp_path).returncode == 0
    result = run_tool("lingbot-lab-firmware", tmp_path, "--no-mount")
    assert result.returncode == 0, result.stderr
    assert (lab / "cmdline").read_text().startswith(f"BOOT_IMAGE=/boot/vmlinuz-{newer} ")
    assert not (lab / "state.json").exists()
    assert not (lab / "state.txt").exists()
    assert (lab / "sys/bus/pci/devices/0000:41:00.0").exists()
    # The module built for the new kernel (dkms autoinstall -k): the driver is back.
    built = tmp_path / f"lib/modules/{newer}/updates/dkms/nvidia-current.ko"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"")
    (tmp_path / f"lib/modules/{newer}/modules.dep").write_text("updates/dkms/nvidia-current.ko:\n")
    state = boot(tmp_path)
    assert state["boot"]["cmdline"].startswith(f"BOOT_IMAGE=/boot/vmlinuz-{newer} ")
