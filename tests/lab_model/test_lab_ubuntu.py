"""Ubuntu-style boot configuration: grub.cfg as Ubuntu's 10_linux writes it ($vt_handoff
on each normal linux line), update-grub keeping that style, and the firmware expanding
$vt_handoff to vt.handoff=7 as grub does with gfxpayload=keep."""

from __future__ import annotations

import json
from pathlib import Path

from labmodel_support import read_profile_yaml, run_tool

from lingbot_lab.grubcfg import render_ubuntu_grub_cfg

PROFILE = "a6000-ubuntu-vt-handoff"
KERNEL = "6.8.0-31-generic"
UUID = "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b"
LINUX = f"linux\t/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro"
BOOT_IMAGE = f"BOOT_IMAGE=/boot/vmlinuz-{KERNEL} root=UUID={UUID} ro"
DROPIN = 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'


def linux_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("linux\t")]


def installed(root: Path) -> None:
    path = root / "opt/lingbot-lab/profile.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(read_profile_yaml(PROFILE)), encoding="utf-8")


def boot(root: Path) -> str:
    result = run_tool("lingbot-lab-firmware", root, "--no-mount")
    assert result.returncode == 0, result.stderr
    return (root / "run/lingbot-lab/cmdline").read_text(encoding="utf-8")


def test_ubuntu_10_linux_ends_normal_entries_with_vt_handoff_when_splash():
    settings = {
        "GRUB_DEFAULT": "0",
        "GRUB_DISTRIBUTOR": "Ubuntu",
        "GRUB_CMDLINE_LINUX": " iommu=pt",
        "GRUB_CMDLINE_LINUX_DEFAULT": "quiet splash",
    }
    text = render_ubuntu_grub_cfg(settings, [KERNEL], UUID)
    assert linux_lines(text) == [
        f"{LINUX}  iommu=pt quiet splash $vt_handoff",
        f"{LINUX}  iommu=pt quiet splash $vt_handoff",
        f"{LINUX} recovery nomodeset dis_ucode_ldr  iommu=pt",
    ]
    lines = text.splitlines()
    assert lines.count('   set default="0"') == 1
    assert lines.count('   set default="${next_entry}"') == 1
    gfxmode = lines.index("function gfxmode {")
    assert lines[gfxmode + 3] == "\t\tset vt_handoff=vt.handoff=7"
    assert lines.count("\tgfxmode $linux_gfx_mode") == 1  # the simple entry
    assert lines.count("\t\tgfxmode $linux_gfx_mode") == 1  # the advanced one, not recovery
    assert (
        f"menuentry 'Ubuntu' --class ubuntu --class gnu-linux --class gnu --class os"
        f" $menuentry_id_option 'gnulinux-simple-{UUID}' {{"
    ) in lines
    assert (
        f"submenu 'Advanced options for Ubuntu' $menuentry_id_option 'gnulinux-advanced-{UUID}' {{"
        in lines
    )


def test_without_splash_10_linux_adds_no_vt_handoff():
    settings = {"GRUB_DISTRIBUTOR": "Ubuntu", "GRUB_CMDLINE_LINUX_DEFAULT": "quiet"}
    text = render_ubuntu_grub_cfg(settings, [KERNEL], UUID)
    assert linux_lines(text)[0] == f"{LINUX}  quiet"


def test_firmware_expands_vt_handoff_and_update_grub_keeps_the_ubuntu_style(tmp_path):
    installed(tmp_path)
    assert boot(tmp_path) == f"{BOOT_IMAGE} quiet splash pci=noacpi vt.handoff=7\n"
    default_grub = (tmp_path / "etc/default/grub").read_text(encoding="utf-8")
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash pci=noacpi"\nGRUB_CMDLINE_LINUX=""\n' in (
        default_grub
    )
    assert "GRUB_DEFAULT=0\nGRUB_TIMEOUT_STYLE=hidden\nGRUB_TIMEOUT=0\n" in default_grub
    grub_cfg = (tmp_path / "boot/grub/grub.cfg").read_text(encoding="utf-8")
    assert linux_lines(grub_cfg)[0] == f"{LINUX}  quiet splash pci=noacpi $vt_handoff"

    (tmp_path / "etc/default/grub").write_text(
        default_grub.replace("splash pci=noacpi", "splash"), encoding="utf-8"
    )
    (tmp_path / "etc/default/grub.d").mkdir()
    (tmp_path / "etc/default/grub.d/lingbot-fleet.cfg").write_text(DROPIN, encoding="utf-8")
    result = run_tool("update-grub", tmp_path)
    assert result.returncode == 0, result.stderr
    grub_cfg = (tmp_path / "boot/grub/grub.cfg").read_text(encoding="utf-8")
    assert linux_lines(grub_cfg)[:2] == [f"{LINUX}  iommu=pt quiet splash $vt_handoff"] * 2
    assert "function gfxmode {" in grub_cfg.splitlines()
    assert boot(tmp_path) == f"{BOOT_IMAGE} iommu=pt quiet splash vt.handoff=7\n"


def test_a_failed_boot_recorded_in_grubenv_boots_in_text_mode_without_vt_handoff(tmp_path):
    installed(tmp_path)
    boot(tmp_path)
    (tmp_path / "boot/grub/grubenv").write_text(
        "# GRUB Environment Block\nrecordfail=1\n".ljust(1024, "#"), encoding="utf-8"
    )
    assert boot(tmp_path) == f"{BOOT_IMAGE} quiet splash pci=noacpi\n"
