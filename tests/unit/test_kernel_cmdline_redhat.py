"""kernel_cmdline on RHEL 8 and RHEL 9 boot layouts, with the lab's grubby stand-in.

The node roots are what the lab's installer model writes for the two RedHat profiles
(lab/profiles/rhel8-bls-kernelopts.yml, rhel9-bls-kernel-cmdline.yml): RHEL 8 with
``options $kernelopts`` entries and grubenv on the EFI partition behind a relative link,
RHEL 9 with literal options and /etc/kernel/cmdline. grubby is lab/node/bin/grubby run on
that root, logging every call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from test_kernel_cmdline_module import GENERATIONS, configure, kc

REPO = Path(__file__).resolve().parents[2]
LAB_NODE = REPO / "lab" / "node"
if str(LAB_NODE) not in sys.path:
    sys.path.insert(0, str(LAB_NODE))

import yaml  # noqa: E402

from lingbot_lab.grubcfg import boot_cmdline, install_boot_config  # noqa: E402
from lingbot_lab.profile import validate_profile  # noqa: E402

UUID = "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b"
MACHINE = "0f3e9c1a5b7d4e2f8a6c0b1d3e5f7a9b"
RHEL8_KERNEL = "4.18.0-513.5.1.el8_9.x86_64"
RHEL9_KERNEL = "5.14.0-362.24.1.el9_3.x86_64"
RHEL8_ARGS = "crashkernel=auto rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet"
RHEL9_ARGS = "crashkernel=1G-4G:192M,4G-64G:256M,64G-:512M rd.lvm.lv=rhel/root rhgb quiet"
ESP_GRUBENV = "boot/efi/EFI/redhat/grubenv"


class RedHatNode:
    def __init__(self, tmp_path: Path, profile_name: str) -> None:
        self.root = tmp_path / "node"
        self.log = tmp_path / "grubby.log"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        with open(REPO / "lab/profiles" / f"{profile_name}.yml", encoding="utf-8") as handle:
            self.profile = validate_profile(yaml.safe_load(handle))
        (self.root / "etc").mkdir(parents=True)
        (self.root / "etc/machine-id").write_text(MACHINE + "\n")
        (self.root / "etc/os-release").write_text('ID="rhel"\nID_LIKE="fedora"\n')
        (self.root / "proc").mkdir()
        install_boot_config(self.root, self.profile)
        self.boot()
        self.grubby = bin_dir / "grubby"
        self.grubby.write_text(
            "#!/bin/sh\n"
            f"echo \"grubby $*\" >> '{self.log}'\n"
            f"LINGBOT_LAB_ROOT='{self.root}' LINGBOT_LAB_LIB='{LAB_NODE}' "
            f"exec '{sys.executable}' '{LAB_NODE}/bin/grubby' \"$@\"\n"
        )
        self.grubby.chmod(0o755)

    def find_bin(self, name: str) -> str | None:
        return {"sh": "/bin/sh", "grubby": str(self.grubby)}.get(name)

    def boot(self) -> None:
        """Reboot: /proc/cmdline becomes what the firmware reads from the default entry."""
        (self.root / "proc/cmdline").write_text(boot_cmdline(self.root, self.profile) + "\n")

    def running(self) -> str:
        return (self.root / "proc/cmdline").read_text().strip()

    def changing_calls(self) -> list[str]:
        calls = self.log.read_text().splitlines() if self.log.exists() else []
        return [call for call in calls if call != "grubby --info=ALL"]

    def snapshot(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file() and not path.is_symlink()
        }

    def text(self, path: str) -> str:
        return (self.root / path).read_text()


def run(node: RedHatNode, **overrides: Any) -> dict[str, Any]:
    """One module call with the default policy (iommu=pt present, pci=noacpi absent)."""
    return configure(node, **overrides)  # type: ignore[arg-type]


GRUBBY_FIX = "grubby --update-kernel=ALL --args=iommu=pt --remove-args=pci=noacpi"


def test_rhel8_kernelopts_fixed_through_the_grubenv_link_then_unchanged(tmp_path: Path) -> None:
    node = RedHatNode(tmp_path, "rhel8-bls-kernelopts")
    result = run(node, generation_run_id="run-1")
    assert result["bootloader"] == "grubby"
    assert result["changed"] is True
    assert node.changing_calls() == [GRUBBY_FIX]
    assert result["actions"] == [
        "update /etc/default/grub",
        "run " + GRUBBY_FIX,
    ]
    assert f'GRUB_CMDLINE_LINUX="{RHEL8_ARGS} iommu=pt"\n' in node.text("etc/default/grub")
    assert (node.root / "boot/grub2/grubenv").is_symlink()
    assert f"kernelopts=root=UUID={UUID} ro {RHEL8_ARGS} iommu=pt\n" in node.text(ESP_GRUBENV)
    entry = f"boot/loader/entries/{MACHINE}-{RHEL8_KERNEL}.conf"
    assert "options $kernelopts\n" in node.text(entry)
    assert result["next_boot"] == [f"root=UUID={UUID}", "ro", *RHEL8_ARGS.split(), "iommu=pt"]
    assert result["next_boot_source"] == "/" + entry
    assert result["reboot_required"] is True
    manifest = json.loads((node.root / GENERATIONS / "pending/run-1/manifest.json").read_text())
    assert [item["path"] for item in manifest["files"]] == [
        "/" + entry,
        "/" + ESP_GRUBENV,
        "/etc/default/grub",
    ]

    node.boot()
    assert "iommu=pt" in node.running().split()
    assert "pci=noacpi" not in node.running().split()
    before = node.snapshot()
    again = run(node)
    assert again["changed"] is False
    assert again["actions"] == []
    assert again["reboot_required"] is False
    assert node.changing_calls() == [GRUBBY_FIX]
    assert node.snapshot() == before


def test_rhel9_kernel_cmdline_and_entries_fixed_then_unchanged(tmp_path: Path) -> None:
    node = RedHatNode(tmp_path, "rhel9-bls-kernel-cmdline")
    result = run(node)
    fixed = f"root=UUID={UUID} ro {RHEL9_ARGS} amd_iommu=on iommu=pt"
    assert result["actions"] == [
        "update /etc/default/grub",
        "update /etc/kernel/cmdline",
        "run grubby --update-kernel=ALL --args=iommu=pt",
    ]
    assert node.changing_calls() == ["grubby --update-kernel=ALL --args=iommu=pt"]
    assert node.text("etc/kernel/cmdline") == fixed + "\n"
    entry = f"boot/loader/entries/{MACHINE}-{RHEL9_KERNEL}.conf"
    assert f"options {fixed}\n" in node.text(entry)
    assert result["next_boot"] == fixed.split()
    assert sorted(result["backups"]) == sorted(
        str(node.root / "var/backup/20250101T000000" / path)
        for path in (entry, "boot/grub2/grubenv", "etc/default/grub", "etc/kernel/cmdline")
    )

    node.boot()
    before = node.snapshot()
    again = run(node)
    assert (again["changed"], again["actions"], again["reboot_required"]) == (False, [], False)
    assert node.changing_calls() == ["grubby --update-kernel=ALL --args=iommu=pt"]
    assert node.snapshot() == before


def test_check_mode_on_rhel8_writes_nothing_and_says_what_would_run(tmp_path: Path) -> None:
    node = RedHatNode(tmp_path, "rhel8-bls-kernelopts")
    before = node.snapshot()
    result = run(node, check_mode=True)
    assert result["actions"] == ["would update /etc/default/grub", "would run " + GRUBBY_FIX]
    assert node.snapshot() == before
    assert node.changing_calls() == []


def test_dangling_grubenv_link_fails_before_anything_is_written(tmp_path: Path) -> None:
    node = RedHatNode(tmp_path, "rhel8-bls-kernelopts")
    (node.root / ESP_GRUBENV).unlink()  # the EFI system partition is not mounted
    before = node.snapshot()
    with pytest.raises(kc.ModuleError) as caught:
        run(node, generation_run_id="run-1")
    assert caught.value.msg == (
        "/boot/grub2/grubenv is a symbolic link to /boot/efi/EFI/redhat/grubenv, which does "
        "not exist (is the file system holding it, such as the EFI system partition, "
        "mounted?); mount it, or replace the link with a regular file; nothing was written"
    )
    assert node.snapshot() == before
    assert node.changing_calls() == []
    assert not (node.root / GENERATIONS).exists()


def test_kernel_cmdline_with_several_lines_is_refused_before_writing(tmp_path: Path) -> None:
    node = RedHatNode(tmp_path, "rhel9-bls-kernel-cmdline")
    (node.root / "etc/kernel/cmdline").write_text("ro quiet\niommu=pt\n")
    before = node.snapshot()
    with pytest.raises(kc.ModuleError) as caught:
        run(node)
    assert caught.value.msg == (
        "/etc/kernel/cmdline has more than one line; kernel-install reads it as one command "
        "line. Join its lines into one and run again. Nothing was written"
    )
    assert node.snapshot() == before
