"""The kernel_cmdline module: run logic on a temp root, and through real ansible.

The boot loader tools are small shell scripts in a temp bin directory: update-grub sources
the temp root's grub defaults files and writes its grub.cfg (one entry, like grub-mkconfig's
10_linux), grubby prints a canned --info=ALL and logs its other calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from service_support import run_playbook

import lingbot_fleet
import lingbot_fleet.boot.cmdline
import lingbot_fleet.boot.grub
import lingbot_fleet.node.generations
import lingbot_fleet.node.nodefiles
import lingbot_fleet.node.receipts
from lingbot_fleet.boot import kernel_cmdline as kc
from lingbot_fleet.boot.bootfiles import BOOT_STATE_READING, boot_state_digest

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "roles" / "kernel_cmdline" / "library"
SAMPLES = Path(__file__).parent / "grub_samples"
DROPIN = "etc/default/grub.d/lingbot-fleet.cfg"
DROPIN_TEXT = (
    "# Managed by lingbot-fleet (role kernel_cmdline): kernel parameters it adds.\n"
    "# Set them in the inventory (kernel_cmdline_present), not here.\n"
    'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'
)
GENERATIONS = "var/lib/lingbot-fleet/generations"


UPDATE_GRUB = """#!/bin/sh
set -e
echo "update-grub $*" >> '{log}'
if [ -e '{fail}' ]; then echo "grub-probe: error: cannot find a device for /" >&2; exit 1; fi
. '{root}/etc/default/grub'
for x in '{root}'/etc/default/grub.d/*.cfg; do [ -e "$x" ] && . "$x"; done
mkdir -p '{root}/boot/grub'
cat > '{root}/boot/grub/grub.cfg' <<EOF
set default="${{GRUB_DEFAULT}}"
menuentry 'Debian GNU/Linux' --class debian \\$menuentry_id_option 'gnulinux-simple-1' {{
\tlinux\t/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT
}}
EOF
"""

GRUBBY = """#!/bin/sh
if [ "$1" = "--info=ALL" ]; then cat '{info}'; exit 0; fi
echo "grubby $*" >> '{log}'
if [ -e '{after}' ]; then
  for entry in '{root}'/boot/loader/entries/*.conf; do cp '{after}' "$entry"; done
fi
"""


class Node:
    """A temp root with /etc/default/grub, /proc and fake boot loader tools."""

    def __init__(
        self,
        tmp_path: Path,
        grub_text: str,
        running: str,
        *,
        vendor: str = "AuthenticAMD",
        os_id: str = "debian",
    ) -> None:
        self.root = tmp_path / "node"
        self.bin = tmp_path / "bin"
        self.log = tmp_path / "commands.log"
        self.fail_marker = tmp_path / "update-grub.fail"
        self.grubby_info = tmp_path / "grubby-info"
        self.grubby_after = tmp_path / "grubby-entry-after"
        (self.root / "etc/default/grub.d").mkdir(parents=True)
        (self.root / "proc").mkdir()
        self.bin.mkdir()
        (self.root / "etc/default/grub").write_bytes(grub_text.encode())
        (self.root / "etc/os-release").write_text(f'ID={os_id}\nPRETTY_NAME="test"\n')
        (self.root / "proc/cmdline").write_text(running + "\n")
        (self.root / "proc/cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n")
        self.grubby_info.write_text("")
        for name, text in (("update-grub", UPDATE_GRUB), ("grubby", GRUBBY)):
            script = self.bin / name
            script.write_text(
                text.format(
                    root=self.root,
                    log=self.log,
                    fail=self.fail_marker,
                    info=self.grubby_info,
                    after=self.grubby_after,
                )
            )
            script.chmod(0o755)

    def find_bin(self, name: str) -> str | None:
        if name == "sh":
            return "/bin/sh"
        path = self.bin / name
        return str(path) if path.exists() else None

    def commands(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def update_grub(self) -> None:
        subprocess.run([str(self.bin / "update-grub")], check=True)
        self.log.unlink()

    def boot(self, running: str) -> None:
        (self.root / "proc/cmdline").write_text(running + "\n")

    def snapshot(self) -> dict[str, bytes]:
        return {
            str(path.relative_to(self.root)): path.read_bytes()
            for path in sorted(self.root.rglob("*"))
            if path.is_file()
        }


def params(root: Path, **overrides: Any) -> dict[str, Any]:
    values = {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "iommu_vendor_switch": False,
        "bootloader": "auto",
        "dropin_name": "lingbot-fleet",
        "update_bootloader": True,
        "backup_dir": "/var/backup",
        "generation_run_id": None,
        "generations_dir": "/" + GENERATIONS,
        "generations_live_runs": None,
        "root": str(root),
        "verify": False,
        "verify_gpu_numa": True,
        # The GPU proof reads the driver (tests/facts/test_boot_proof.py): off here, where
        # the sysfs tree has a GPU but no driver stands behind it.
        "verify_gpus": False,
        "verify_gpus_before": [],
        "verify_against": "policy",
        "guard_reboot": False,
        "receipt_digest": None,
    }
    values.update(overrides)
    return values


def node_changes(
    values: dict[str, Any], check_mode: bool
) -> lingbot_fleet.node.nodefiles.NodeChanges:
    return lingbot_fleet.node.nodefiles.NodeChanges(
        check_mode=check_mode,
        root=values["root"],
        generations_dir=values["generations_dir"],
        run_id=values["generation_run_id"],
        backup_dir=None if values["generation_run_id"] else values["backup_dir"],
        backup_stamp="20250101T000000",
    )


def configure(node: Node, *, check_mode: bool = False, **overrides: Any) -> dict[str, Any]:
    values = params(node.root, **overrides)
    return kc.configure(values, node_changes(values, check_mode), node.find_bin)


DEBIAN12 = (SAMPLES / "debian12.grub").read_text()
DEBIAN12_AFTER = (SAMPLES / "debian12.expected").read_text()
RUNNING_OLD = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro quiet pci=noacpi"
RUNNING_NEW = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro iommu=pt quiet"


def installed(tmp_path: Path, grub_text: str = DEBIAN12, running: str = RUNNING_OLD) -> Node:
    """A node as the installer leaves it: grub.cfg generated from its grub files."""
    node = Node(tmp_path, grub_text, running)
    node.update_grub()
    return node


def test_first_run_edits_saves_and_regenerates_grub_cfg(tmp_path: Path) -> None:
    node = installed(tmp_path)
    result = configure(node)
    assert result["changed"] is True
    assert result["bootloader"] == "grub_d"
    assert result["changed_paths"] == ["/etc/default/grub", "/" + DROPIN]
    assert result["actions"] == [
        "update /etc/default/grub",
        "create /" + DROPIN,
        "run update-grub (the default entry of /boot/grub/grub.cfg lacks iommu=pt, "
        "holds pci=noacpi)",
    ]
    assert node.commands() == ["update-grub "]
    assert result["configured"] == ["iommu=pt", "quiet"]
    assert result["next_boot"] == ["root=UUID=1", "ro", "iommu=pt", "quiet"]
    assert result["next_boot_source"] == "/boot/grub/grub.cfg"
    assert result["running"] == RUNNING_OLD.split()
    assert result["reboot_required"] is True
    assert result["missing_running"] == ["iommu=pt"]
    assert result["unwanted_running"] == ["pci=noacpi"]
    assert result["ansible_facts"] == {
        "kernel_cmdline_reboot_required": True,
        "kernel_cmdline_configured": ["iommu=pt", "quiet"],
        "kernel_cmdline_running": RUNNING_OLD.split(),
    }
    backup = f"{node.root}/var/backup/20250101T000000/etc/default/grub"
    assert result["backups"] == [backup]
    assert Path(backup).read_text() == DEBIAN12
    assert (node.root / "etc/default/grub").read_text() == DEBIAN12_AFTER
    assert (node.root / DROPIN).read_text() == DROPIN_TEXT
    assert oct((node.root / DROPIN).stat().st_mode & 0o777) == "0o644"
    assert result["diff"][0] == {
        "before_header": "/etc/default/grub",
        "after_header": "/etc/default/grub",
        "before": DEBIAN12,
        "after": DEBIAN12_AFTER,
    }
    assert result["diff"][1]["before_header"] == f"/{DROPIN} (absent)"


def test_second_run_is_unchanged_and_runs_nothing(tmp_path: Path) -> None:
    node = installed(tmp_path)
    configure(node)
    before = node.snapshot()
    node.log.unlink()
    result = configure(node)
    assert result["changed"] is False
    assert result["actions"] == [] and result["changed_paths"] == [] and result["diff"] == []
    assert result["reboot_required"] is True
    assert node.commands() == []
    assert node.snapshot() == before
    node.boot(RUNNING_NEW)
    assert configure(node)["ansible_facts"]["kernel_cmdline_reboot_required"] is False
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False


def test_check_mode_writes_nothing_and_reports_the_same(tmp_path: Path) -> None:
    node = installed(tmp_path)
    before = node.snapshot()
    result = configure(node, check_mode=True)
    assert node.snapshot() == before
    assert node.commands() == []
    assert result["changed"] is True
    assert result["changed_paths"] == ["/etc/default/grub", "/" + DROPIN]
    assert result["actions"] == [
        "would update /etc/default/grub",
        "would create /" + DROPIN,
        "would run update-grub (the default entry of /boot/grub/grub.cfg lacks iommu=pt, "
        "holds pci=noacpi)",
    ]
    assert result["configured"] == ["iommu=pt", "quiet"]
    assert result["diff"][0]["after"] == DEBIAN12_AFTER
    assert "backups" not in result


def test_reboot_not_required_when_running_kernel_follows_policy(tmp_path: Path) -> None:
    node = installed(tmp_path, running=RUNNING_NEW)
    result = configure(node)
    assert result["reboot_required"] is False
    assert result["missing_running"] == [] and result["unwanted_running"] == []


def test_vendor_switch_comes_from_cpuinfo(tmp_path: Path) -> None:
    node = Node(tmp_path, 'GRUB_CMDLINE_LINUX=""\n', RUNNING_NEW, vendor="GenuineIntel")
    result = configure(node, iommu_vendor_switch=True)
    assert result["configured"] == ["iommu=pt", "intel_iommu=on"]
    assert result["missing_running"] == ["intel_iommu=on"]
    assert (
        (node.root / DROPIN)
        .read_text()
        .endswith('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt intel_iommu=on"\n')
    )


def test_missing_update_grub_fails_before_writing(tmp_path: Path) -> None:
    node = installed(tmp_path)
    (node.bin / "update-grub").unlink()
    before = node.snapshot()
    with pytest.raises(kc.ModuleError) as caught:
        configure(node)
    assert caught.value.msg == (
        "update-grub was not found on the node (searched PATH and the sbin directories); "
        "nothing was written. Install grub2-common, or set update_bootloader to false to "
        "edit the files only"
    )
    assert node.snapshot() == before


def test_converged_node_needs_no_update_grub(tmp_path: Path) -> None:
    node = installed(tmp_path, DEBIAN12_AFTER, RUNNING_NEW)
    (node.root / DROPIN).write_text(DROPIN_TEXT)
    node.update_grub()
    (node.bin / "update-grub").unlink()
    assert configure(node)["changed"] is False


@pytest.mark.parametrize(
    ("grub_text", "overrides", "error", "message"),
    [
        (
            DEBIAN12,
            {"present": {"iommu": "pt"}, "absent": ["iommu"]},
            lingbot_fleet.boot.cmdline.PolicyError,
            "kernel parameter 'iommu' is asked to be absent while 'iommu=pt' is asked to be "
            "present; remove it from one of the two lists.",
        ),
        (
            DEBIAN12,
            {"absent": ["pci noacpi"]},
            lingbot_fleet.boot.cmdline.PolicyError,
            "absent: malformed kernel parameter name 'pci noacpi'; a name is letters, digits, "
            "'_', '-' and '.', starting with a letter, digit or '_'. Fix the name in the policy.",
        ),
        (
            'GRUB_CMDLINE_LINUX="quiet pci=noacpi\n',
            {},
            lingbot_fleet.boot.grub.GrubParseError,
            "/etc/default/grub:1: unbalanced double quote: the quote opened here is never "
            "closed. Fix: close the quote.",
        ),
    ],
)
def test_bad_input_writes_nothing(
    tmp_path: Path, grub_text: str, overrides: dict, error: type, message: str
) -> None:
    node = Node(tmp_path, grub_text, RUNNING_OLD)
    before = node.snapshot()
    with pytest.raises(error) as caught:
        configure(node, **overrides)
    assert str(caught.value) == message
    assert node.snapshot() == before
    assert node.commands() == []


def test_empty_present_removes_the_owned_dropin(tmp_path: Path) -> None:
    node = installed(tmp_path, DEBIAN12_AFTER, RUNNING_NEW)
    (node.root / DROPIN).write_text(DROPIN_TEXT)
    node.update_grub()
    result = configure(node, present={})
    assert result["changed_paths"] == ["/" + DROPIN]
    assert result["actions"][0] == f"remove /{DROPIN}"
    assert not (node.root / DROPIN).exists()
    assert Path(f"{node.root}/var/backup/20250101T000000/{DROPIN}").read_text() == DROPIN_TEXT
    assert node.commands() == ["update-grub "]


# --- converging from state: grub.cfg against the grub files ------------------------------


def test_stale_grub_cfg_is_regenerated(tmp_path: Path) -> None:
    """The drop-in was written but update-grub never ran (a killed run, or by hand)."""
    node = installed(tmp_path, DEBIAN12_AFTER, RUNNING_OLD)
    (node.root / DROPIN).write_text(DROPIN_TEXT)
    before_cfg = (node.root / "boot/grub/grub.cfg").read_text()
    result = configure(node)
    assert result["changed"] is True
    assert result["changed_paths"] == []
    assert result["actions"] == [
        "run update-grub (the default entry of /boot/grub/grub.cfg lacks iommu=pt)"
    ]
    assert node.commands() == ["update-grub "]
    assert (node.root / "boot/grub/grub.cfg").read_text() != before_cfg
    assert result["next_boot"] == ["root=UUID=1", "ro", "iommu=pt", "quiet"]
    node.log.unlink()
    assert configure(node)["changed"] is False
    assert node.commands() == []


def test_stale_grub_cfg_still_holding_an_absent_parameter_is_regenerated(tmp_path: Path) -> None:
    node = installed(tmp_path, DEBIAN12, RUNNING_OLD)
    (node.root / "etc/default/grub").write_text(DEBIAN12_AFTER)
    (node.root / DROPIN).write_text(DROPIN_TEXT)
    result = configure(node, check_mode=True)
    assert result["actions"] == [
        "would run update-grub (the default entry of /boot/grub/grub.cfg lacks iommu=pt, "
        "holds pci=noacpi)"
    ]


def test_failed_update_grub_is_retried_by_the_next_run(tmp_path: Path) -> None:
    node = installed(tmp_path)
    node.fail_marker.touch()
    with pytest.raises(kc.ModuleError) as caught:
        configure(node)
    assert caught.value.msg.startswith(f"{node.bin}/update-grub failed with exit status 1: ")
    assert "cannot find a device for /" in caught.value.msg
    assert caught.value.msg.endswith(
        "The grub defaults files are written; grub.cfg is regenerated by the next run. Fix "
        "the cause and run again"
    )
    assert (node.root / DROPIN).exists()
    node.fail_marker.unlink()
    node.log.unlink()
    again = configure(node)
    assert again["changed"] is True and again["changed_paths"] == []
    assert node.commands() == ["update-grub "]
    assert "iommu=pt" in (node.root / "boot/grub/grub.cfg").read_text()


def test_grub_cfg_that_does_not_follow_the_files_after_update_grub_fails(tmp_path: Path) -> None:
    node = installed(tmp_path)
    grub_cfg = node.root / "boot/grub/grub.cfg"
    script = node.bin / "update-grub"
    script.write_text(
        f'#!/bin/sh\nprintf \'menuentry "Custom" {{\\n linux /vmlinuz ro quiet pci=noacpi\\n'
        f"}}\\n' > '{grub_cfg}'\n"
    )
    with pytest.raises(kc.ModuleError) as caught:
        configure(node)
    assert caught.value.msg == (
        "update-grub ran, but the default entry of /boot/grub/grub.cfg (Custom) still lacks "
        "iommu=pt, holds pci=noacpi: grub does not boot what the grub defaults files "
        "configure. Check GRUB_DEFAULT and the scripts in /etc/grub.d, then run again"
    )


# --- a parameter already set where the admin put it -----------------------------------------


@pytest.mark.parametrize(
    ("grub_text", "dropin"),
    [
        ('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="iommu=pt"\n', None),
        ('GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\nGRUB_CMDLINE_LINUX=""\n', None),
        (
            'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX=""\n',
            ("10-site.cfg", 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'),
        ),
    ],
)
def test_parameter_already_set_is_satisfied(
    tmp_path: Path, grub_text: str, dropin: tuple[str, str] | None
) -> None:
    node = Node(tmp_path, grub_text, RUNNING_NEW)
    if dropin is not None:
        (node.root / "etc/default/grub.d" / dropin[0]).write_text(dropin[1])
    node.update_grub()
    before = node.snapshot()
    result = configure(node)
    assert result["changed"] is False
    assert result["actions"] == []
    assert node.commands() == []
    assert node.snapshot() == before
    assert not (node.root / DROPIN).exists()
    assert result["reboot_required"] is False
    assert result["configured"].count("iommu=pt") == 1
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False


def test_dropin_that_repeats_an_admin_parameter_is_removed(tmp_path: Path) -> None:
    """iommu=pt moved into /etc/default/grub by hand, the drop-in still adds it too."""
    grub_text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"\nGRUB_CMDLINE_LINUX=""\n'
    node = Node(tmp_path, grub_text, RUNNING_NEW)
    (node.root / DROPIN).write_text(DROPIN_TEXT)
    node.update_grub()
    result = configure(node)
    assert result["changed_paths"] == ["/" + DROPIN]
    assert not (node.root / DROPIN).exists()
    assert result["configured"] == ["quiet", "iommu=pt"]
    assert result["reboot_required"] is False
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False


def test_hand_edit_matching_the_generated_grub_cfg_changes_nothing(tmp_path: Path) -> None:
    """The drop-in's parameter moved into /etc/default/grub, grub.cfg left as it was."""
    node = installed(tmp_path)
    configure(node)
    node.boot(RUNNING_NEW)
    (node.root / DROPIN).unlink()
    text = DEBIAN12_AFTER.replace(
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"', 'GRUB_CMDLINE_LINUX_DEFAULT="quiet iommu=pt"'
    )
    (node.root / "etc/default/grub").write_text(text)
    node.log.unlink()
    result = configure(node)
    assert result["changed"] is False
    assert node.commands() == []
    assert result["reboot_required"] is False
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False


UBUNTU_GRUB_CFG = """\
function gfxmode {
\tset gfxpayload="${1}"
\tif [ "${1}" = "keep" ]; then
\t\tset vt_handoff=vt.handoff=7
\telse
\t\tset vt_handoff=
\tfi
}
set linux_gfx_mode=keep
menuentry 'Ubuntu' --class ubuntu $menuentry_id_option 'gnulinux-simple-1' {
\tgfxmode $linux_gfx_mode
\tlinux\t/boot/vmlinuz-6.8.0-31-generic root=UUID=1 ro  iommu=pt quiet splash $vt_handoff
}
"""


def test_ubuntu_vt_handoff_makes_no_stale_grub_cfg_nor_pending_reboot(tmp_path: Path) -> None:
    grub_text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\nGRUB_CMDLINE_LINUX="iommu=pt"\n'
    running = "BOOT_IMAGE=/boot/vmlinuz-6.8.0-31-generic root=UUID=1 ro iommu=pt quiet splash "
    node = Node(tmp_path, grub_text, running + "vt.handoff=7", os_id="ubuntu")
    (node.root / "boot/grub").mkdir(parents=True)
    (node.root / "boot/grub/grub.cfg").write_text(UBUNTU_GRUB_CFG)
    result = configure(node)
    assert result["changed"] is False
    assert node.commands() == []
    assert result["next_boot"][-1] == "vt.handoff=7"
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False
    node.boot(running)
    assert lingbot_fleet.boot.grub.boot_state(str(node.root))["reboot_required"] is False


# --- the boot loader family ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("os_release", "bls", "expected"),
    [
        ("ID=debian\n", False, "grub_d"),
        ('ID=ubuntu\nID_LIKE="debian"\n', False, "grub_d"),
        ('ID="rocky"\nID_LIKE="rhel centos fedora"\n', False, "grubby"),
        ('ID="rhel"\nID_LIKE="fedora"\n', False, "grubby"),
        ("ID=debian\n", True, "grubby"),
        ("ID=gentoo\n", False, "grub_d"),
    ],
)
def test_bootloader_is_detected_on_the_node(
    tmp_path: Path, os_release: str, bls: bool, expected: str
) -> None:
    node = Node(tmp_path, 'GRUB_CMDLINE_LINUX=""\n', RUNNING_NEW)
    (node.root / "etc/os-release").write_text(os_release)
    if bls:
        (node.root / "boot/loader/entries").mkdir(parents=True)
        (node.root / "boot/loader/entries/abc-5.14.0.conf").write_text("options ro\n")
    assert kc.detect_bootloader("auto", str(node.root), node.find_bin) == expected
    assert kc.detect_bootloader("grubby", str(node.root), node.find_bin) == "grubby"


def test_unknown_node_without_tools_fails_with_the_fix(tmp_path: Path) -> None:
    node = Node(tmp_path, 'GRUB_CMDLINE_LINUX=""\n', RUNNING_NEW)
    (node.root / "etc/os-release").write_text('ID=alpine\nID_LIKE=""\n')
    with pytest.raises(kc.ModuleError) as caught:
        kc.detect_bootloader("auto", str(node.root), lambda name: None)
    assert caught.value.msg == (
        "cannot tell how this node boots: /etc/os-release names neither the Debian nor the "
        "RedHat family (ID and ID_LIKE: alpine), there are no BLS entries and neither "
        "update-grub nor grubby is installed; nothing was written. Set bootloader "
        "(kernel_cmdline_bootloader) to grub_d or grubby"
    )


# --- grubby (RedHat family) ----------------------------------------------------------------

GRUBBY_INFO = (
    'index=0\nkernel="/boot/vmlinuz-5.14.0-362.el9.x86_64"\n'
    'args="ro crashkernel=auto pci=noacpi,realloc rhgb quiet"\n'
    'root="/dev/mapper/rl-root"\nindex=1\nkernel="/boot/vmlinuz-0-rescue"\n'
    'args="ro crashkernel=auto rhgb quiet iommu=pt"\n'
)


def rhel_node(tmp_path: Path, grub_text: str, running: str, info: str) -> Node:
    node = Node(tmp_path, grub_text, running, os_id='"rocky"\nID_LIKE="rhel centos fedora"')
    node.grubby_info.write_text(info)
    return node


def test_grubby_family_edits_default_grub_and_boot_entries(tmp_path: Path) -> None:
    grub_text = 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto pci=noacpi rhgb quiet"\n'
    node = rhel_node(tmp_path, grub_text, RUNNING_OLD, GRUBBY_INFO)
    result = configure(node)
    assert result["bootloader"] == "grubby"
    assert (node.root / "etc/default/grub").read_text() == (
        'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto rhgb quiet iommu=pt"\n'
    )
    assert node.commands() == [
        "grubby --update-kernel=ALL --args=iommu=pt pci=realloc --remove-args=pci=noacpi,realloc"
    ]
    assert result["actions"][-1] == (
        "run grubby --update-kernel=ALL --args=iommu=pt pci=realloc "
        "--remove-args=pci=noacpi,realloc"
    )
    assert not (node.root / DROPIN).exists()


def test_grubby_family_second_run_is_unchanged(tmp_path: Path) -> None:
    grub_text = 'GRUB_CMDLINE_LINUX="rhgb quiet iommu=pt"\n'
    info = 'kernel="/boot/vmlinuz-5"\nargs="ro rhgb quiet iommu=pt pci=realloc"\n'
    node = rhel_node(tmp_path, grub_text, RUNNING_NEW, info)
    result = configure(node)
    assert result["changed"] is False
    assert node.commands() == []


def bls_node(tmp_path: Path) -> Node:
    grub_text = 'GRUB_CMDLINE_LINUX="crashkernel=auto pci=noacpi rhgb quiet"\n'
    node = rhel_node(tmp_path, grub_text, RUNNING_OLD, GRUBBY_INFO)
    entries = node.root / "boot/loader/entries"
    entries.mkdir(parents=True)
    (entries / "abc-5.14.0.conf").write_text("version 5.14.0\noptions ro pci=noacpi,realloc\n")
    (node.root / "boot/grub2").mkdir(parents=True)
    (node.root / "boot/grub2/grubenv").write_text("# GRUB Environment Block\n")
    return node


def test_grubby_family_records_the_boot_entries_before_grubby(tmp_path: Path) -> None:
    node = bls_node(tmp_path)
    node.grubby_after.write_text("version 5.14.0\noptions ro pci=realloc iommu=pt\n")
    result = configure(node, generation_run_id="run-1")
    manifest = json.loads((node.root / GENERATIONS / "pending/run-1/manifest.json").read_text())
    assert [entry["path"] for entry in manifest["files"]] == [
        "/boot/loader/entries/abc-5.14.0.conf",
        "/boot/grub2/grubenv",
        "/etc/default/grub",
    ]
    assert result["ansible_facts"]["lingbot_generation_pending"] == "run-1"
    assert result["next_boot_source"] == "/boot/loader/entries/abc-5.14.0.conf"
    assert result["next_boot"] == ["ro", "pci=realloc", "iommu=pt"]


def test_boot_entry_that_grubby_left_wrong_fails(tmp_path: Path) -> None:
    node = bls_node(tmp_path)
    with pytest.raises(kc.ModuleError) as caught:
        configure(node)
    assert caught.value.msg == (
        "grubby ran, but the default boot entry /boot/loader/entries/abc-5.14.0.conf still "
        "lacks iommu=pt, holds pci=noacpi,realloc. Check it with grubby --info=DEFAULT, then "
        "run again"
    )


# --- recording into the run's generation -----------------------------------------------


def test_generation_run_id_records_files_instead_of_backing_up(tmp_path: Path) -> None:
    node = installed(tmp_path)
    result = configure(node, generation_run_id="run-1")
    pending = node.root / GENERATIONS / "pending/run-1"
    assert result["backups"] == [str(pending / "files/etc/default/grub")]
    assert result["ansible_facts"]["lingbot_generation_pending"] == "run-1"
    assert (pending / "files/etc/default/grub").read_text() == DEBIAN12
    assert not (node.root / "var/backup").exists()
    committed = lingbot_fleet.node.generations.commit(
        "/" + GENERATIONS, "run-1", {"playbook": "site.yml"}, root=str(node.root)
    )
    assert committed.generation == 1
    assert committed.changed_files == ["/etc/default/grub", "/" + DROPIN]
    plan = lingbot_fleet.node.generations.plan_rollback("/" + GENERATIONS, root=str(node.root))
    assert [(r.path, r.action) for r in plan.restores] == [
        ("/etc/default/grub", "write"),
        ("/" + DROPIN, "remove"),
    ]
    lingbot_fleet.node.generations.apply_rollback(plan, "/" + GENERATIONS, "rb", str(node.root))
    assert (node.root / "etc/default/grub").read_text() == DEBIAN12
    assert not (node.root / DROPIN).exists()


def test_generation_check_mode_records_nothing(tmp_path: Path) -> None:
    node = installed(tmp_path)
    before = node.snapshot()
    result = configure(node, check_mode=True, generation_run_id="run-1")
    assert node.snapshot() == before
    assert "lingbot_generation_pending" not in result["ansible_facts"]


# --- verify mode ---------------------------------------------------------------------------


def make_sysfs(root: Path, group_type: str, numa_node: str) -> None:
    group = root / "sys/kernel/iommu_groups/18"
    group.mkdir(parents=True)
    (group / "type").write_text(group_type + "\n")
    for bdf, vendor, cls in (
        ("0000:41:00.0", "0x10de", "0x030000"),
        ("0000:41:00.1", "0x10de", "0x040300"),
        ("0000:40:01.1", "0x1022", "0x060400"),
    ):
        device = root / "sys/bus/pci/devices" / bdf
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(cls + "\n")
        (device / "numa_node").write_text(numa_node + "\n")


def test_verify_passes_with_evidence(tmp_path: Path) -> None:
    node = Node(tmp_path, DEBIAN12, RUNNING_NEW)
    make_sysfs(node.root, "identity", "0")
    result = kc.verify(params(node.root, verify=True))
    assert result["problems"] == []
    assert result["evidence"] == {
        "cmdline": RUNNING_NEW,
        "iommu_group_types": {"18": "identity"},
        "gpus": [{"bdf": "0000:41:00.0", "numa_node": 0}],
    }
    assert result["ansible_facts"] == {
        "kernel_cmdline_reboot_required": False,
        "kernel_cmdline_running": RUNNING_NEW.split(),
        "lingbot_boot_id": None,
    }


def test_verify_fails_with_every_problem(tmp_path: Path) -> None:
    node = Node(tmp_path, DEBIAN12, RUNNING_OLD)
    make_sysfs(node.root, "DMA-FQ", "-1")
    with pytest.raises(kc.ModuleError) as caught:
        kc.verify(params(node.root, verify=True))
    assert caught.value.msg == (
        "the running kernel does not follow the kernel command-line policy: iommu=pt is "
        "missing from /proc/cmdline; pci=noacpi is in /proc/cmdline; IOMMU group 18 has type "
        "'DMA-FQ', not 'identity', though iommu=pt is asked; GPU 0000:41:00.0 has numa_node "
        "-1 (the firmware's NUMA information is not in effect; pci=noacpi does this)"
    )
    assert caught.value.details["evidence"]["gpus"] == [{"bdf": "0000:41:00.0", "numa_node": -1}]


def test_verify_numa_check_can_be_turned_off(tmp_path: Path) -> None:
    node = Node(tmp_path, DEBIAN12, RUNNING_NEW)
    make_sysfs(node.root, "identity", "-1")
    assert kc.verify(params(node.root, verify=True, verify_gpu_numa=False))["problems"] == []


# --- guard_reboot: before a reboot --------------------------------------------------------


def install_kernel(root: Path, release: str, module: str | None) -> None:
    """A kernel as its package leaves it (image, modules directory, modules.dep), with the
    NVIDIA module DKMS built for it, or none (``module`` None: the DKMS build failed)."""
    (root / "boot").mkdir(exist_ok=True)
    (root / f"boot/vmlinuz-{release}").write_bytes(b"")
    modules = root / "lib/modules" / release
    (modules / "kernel").mkdir(parents=True)
    dep = "kernel/drivers/net/e1000e.ko:\n"
    if module is not None:
        (modules / module).parent.mkdir(parents=True, exist_ok=True)
        (modules / module).write_bytes(b"\x7fELF")
        dep += f"{module}:\n"
    (modules / "modules.dep").write_text(dep)


def boot_entry_kernel(node: Node, release: str) -> None:
    """grub.cfg's default entry boots ``release`` (as update-grub writes it after a kernel
    update makes it the newest)."""
    cfg = node.root / "boot/grub/grub.cfg"
    cfg.write_text(cfg.read_text().replace("vmlinuz-6.1.0-18-amd64", f"vmlinuz-{release}"))


def test_guard_lets_a_reboot_into_a_kernel_with_its_nvidia_module_go(tmp_path: Path) -> None:
    node = installed(tmp_path)
    configure(node)
    make_sysfs(node.root, "identity", "0")
    install_kernel(node.root, "6.1.0-18-amd64", "updates/dkms/nvidia-current.ko")
    before = node.snapshot()
    result = kc.guard_reboot(params(node.root, guard_reboot=True))
    assert result["changed"] is False
    assert result["gpus_on_bus"] == ["0000:41:00.0"]
    assert result["next_boot_driver"]["kernel"] == "6.1.0-18-amd64"
    assert result["next_boot_driver"]["state"] == "built"
    assert result["next_boot_driver"]["modules"] == ["updates/dkms/nvidia-current.ko"]
    assert node.snapshot() == before


def test_guard_refuses_a_reboot_into_a_kernel_without_the_nvidia_module(tmp_path: Path) -> None:
    """A kernel update whose DKMS build failed became the default entry."""
    node = installed(tmp_path)
    configure(node)
    make_sysfs(node.root, "identity", "0")
    install_kernel(node.root, "6.1.0-18-amd64", "updates/dkms/nvidia-current.ko")
    install_kernel(node.root, "6.1.0-99-amd64", None)
    boot_entry_kernel(node, "6.1.0-99-amd64")
    before = node.snapshot()
    with pytest.raises(kc.ModuleError) as caught:
        kc.guard_reboot(params(node.root, guard_reboot=True))
    assert caught.value.msg == (
        "not rebooted, the node keeps running as it is: the next boot's kernel 6.1.0-99-amd64 "
        "has no NVIDIA kernel module (/lib/modules/6.1.0-99-amd64: no nvidia.ko or "
        "nvidia-current.ko in updates/dkms, extra, weak-updates or kernel/), so the GPUs "
        "would come back without their driver. Fix: build it (dkms autoinstall -k "
        "6.1.0-99-amd64, or install the precompiled NVIDIA module package for that kernel), "
        "or make the default boot entry a kernel that has it (grub-set-default, grubby "
        "--set-default)"
    )
    assert caught.value.details["next_boot_driver"]["state"] == "missing"
    assert node.snapshot() == before


def test_guard_needs_no_module_on_a_node_without_nvidia_gpus(tmp_path: Path) -> None:
    node = installed(tmp_path)
    configure(node)
    result = kc.guard_reboot(params(node.root, guard_reboot=True))
    assert result["gpus_on_bus"] == []
    assert result["next_boot_driver"]["state"] == "missing"


def test_guard_refuses_a_default_entry_that_misses_the_policy(tmp_path: Path) -> None:
    """The grub files were changed, but grub.cfg was not regenerated (or was by hand)."""
    node = installed(tmp_path)
    make_sysfs(node.root, "identity", "0")
    install_kernel(node.root, "6.1.0-18-amd64", "updates/dkms/nvidia-current.ko")
    with pytest.raises(kc.ModuleError) as caught:
        kc.guard_reboot(params(node.root, guard_reboot=True))
    assert caught.value.msg == (
        "not rebooted, the node keeps running as it is: the default boot entry "
        "(/boot/grub/grub.cfg, gnulinux-simple-1) lacks iommu=pt, holds pci=noacpi: the "
        "reboot would not apply the policy; run the kernel_cmdline role again"
    )
    # A rollback reboots into the configuration it restored: only the driver is asked.
    result = kc.guard_reboot(params(node.root, guard_reboot=True, verify_against="configuration"))
    assert result["next_boot_driver"]["state"] == "built"
    install_kernel(node.root, "6.1.0-99-amd64", None)
    boot_entry_kernel(node, "6.1.0-99-amd64")
    with pytest.raises(
        kc.ModuleError, match=r"kernel 6\.1\.0-99-amd64 has no NVIDIA kernel module"
    ):
        kc.guard_reboot(params(node.root, guard_reboot=True, verify_against="configuration"))


def test_guard_lets_an_unnamed_kernel_go_with_a_warning(tmp_path: Path) -> None:
    node = installed(tmp_path)
    configure(node)
    make_sysfs(node.root, "identity", "0")
    boot_entry_kernel(node, "")
    cfg = node.root / "boot/grub/grub.cfg"
    cfg.write_text(cfg.read_text().replace("/boot/vmlinuz-", "/boot/vmlinuz"))
    result = kc.guard_reboot(params(node.root, guard_reboot=True))
    assert result["next_boot_driver"]["state"] == "unknown"
    assert result["warnings"] == [
        "the default boot entry's kernel (/boot/vmlinuz) does not name its release, so its "
        "NVIDIA module was not looked for"
    ]


# --- through real ansible ----------------------------------------------------------------


def run_ansible(node: Node, *, check: bool = False, diff: bool = False, **overrides: Any) -> dict:
    args = {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "root": str(node.root),
        "update_bootloader": False,
        "backup_dir": "/var/backup",
    }
    args.update(overrides)
    env = dict(os.environ)
    env.update(
        {
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_MODULE_UTILS": str(REPO / "python"),
            "ANSIBLE_LIBRARY": str(LIBRARY),
            "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
            "ANSIBLE_STDOUT_CALLBACK": "minimal",
            "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(node.root.parent / "ansible-tmp"),
            "ANSIBLE_HOME": str(node.root.parent / "ansible-home"),
        }
    )
    ansible = Path(sys.executable).parent / "ansible"
    argv = [
        str(ansible),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        "kernel_cmdline",
        "-a",
        json.dumps(args),
    ]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    done = subprocess.run(
        argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    marker = done.stdout.find("localhost | ")
    _, separator, body = done.stdout[max(marker, 0) :].partition(" => ")
    assert marker >= 0 and separator, done.stderr + done.stdout
    return json.loads(body[: body.rfind("}") + 1])


def test_real_ansible_check_then_apply_then_unchanged(tmp_path: Path) -> None:
    node = installed(tmp_path)
    before = node.snapshot()
    checked = run_ansible(node, check=True)
    assert checked["changed"] is True
    assert checked["changed_paths"] == ["/etc/default/grub", "/" + DROPIN]
    assert node.snapshot() == before
    applied = run_ansible(node)
    assert applied["changed"] is True
    assert applied["configured"] == ["iommu=pt", "quiet"]
    assert applied["reboot_required"] is True
    assert (node.root / "etc/default/grub").read_text() == DEBIAN12_AFTER
    assert (node.root / DROPIN).read_text() == DROPIN_TEXT
    again = run_ansible(node)
    assert again["changed"] is False
    assert again["changed_paths"] == []


def test_real_ansible_records_into_the_generation_and_sets_facts(tmp_path: Path) -> None:
    node = installed(tmp_path)
    applied = run_ansible(node, generation_run_id="run-1")
    pending = node.root / GENERATIONS / "pending/run-1"
    assert applied["backups"] == [str(pending / "files/etc/default/grub")]
    assert (pending / "files/etc/default/grub").read_text() == DEBIAN12
    assert applied["ansible_facts"] == {
        "kernel_cmdline_reboot_required": True,
        "kernel_cmdline_configured": ["iommu=pt", "quiet"],
        "kernel_cmdline_running": RUNNING_OLD.split(),
        "lingbot_generation_pending": "run-1",
        "lingbot_boot_id": None,
    }


def test_real_ansible_reports_a_bad_policy(tmp_path: Path) -> None:
    node = installed(tmp_path)
    before = node.snapshot()
    result = run_ansible(node, absent=["iommu"])
    assert node.snapshot() == before
    assert result["changed"] is False
    assert result["msg"] == (
        "kernel parameter 'iommu' is asked to be absent while 'iommu=pt' is asked to be "
        "present; remove it from one of the two lists. Nothing was written."
    )


# --- the receipt: a later run answered without a call ------------------------------------

RECEIPT = "var/lib/lingbot-fleet/receipts/kernel_cmdline.json"


def reading(node: Node) -> dict[str, Any]:
    """The receipt as gpu_facts reads it at the start of a run."""
    found = lingbot_fleet.node.receipts.read_receipts(
        str(node.root),
        lambda units: {},
        1_800_000_000.0,
        {BOOT_STATE_READING: lambda _recorded: boot_state_digest(str(node.root))},
    )
    return found["kernel_cmdline"]


def kept(node: Node, digest: str | None = "d1") -> tuple[dict[str, Any], str]:
    """A configure call and what became of its receipt (the module's keep_receipt)."""
    values = params(node.root, receipt_digest=digest)
    changes = node_changes(values, False)
    result = kc.configure(values, changes, node.find_bin)
    return result, kc.keep_receipt(values, changes, result)


def test_the_receipt_keeps_the_result_of_a_call_that_changed_nothing(tmp_path: Path) -> None:
    node = installed(tmp_path)
    (node.root / "proc/sys/kernel/random").mkdir(parents=True)
    (node.root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    applied, receipt = kept(node)
    assert applied["changed"] is True and receipt == "none"
    again, receipt = kept(node)
    assert again["changed"] is False and receipt == "written"
    assert kept(node)[1] == "unchanged"
    entry = reading(node)
    assert lingbot_fleet.node.receipts.unchanged(entry, "d1", 1_800_000_000.0) is None
    assert lingbot_fleet.node.receipts.unchanged(entry, "d2", 1_800_000_000.0) == (
        "the options changed since the receipt"
    )
    answer = lingbot_fleet.node.receipts.replay(entry["receipt"])
    third = configure(node)
    assert answer is not None and third["changed"] is False
    # The module's own result, every key; only where the answer came from differs.
    assert answer.pop("receipt") == "stands"
    assert answer == third
    assert oct((node.root / RECEIPT).stat().st_mode & 0o777) == "0o600"
    # A call that changes something takes the receipt away.
    node.boot(RUNNING_NEW)
    (node.root / "etc/default/grub").write_text(DEBIAN12)
    assert kept(node)[1] == "removed"
    assert not (node.root / RECEIPT).exists()


BOOT_MOVES = {
    "a grub defaults file edited": lambda root: (root / "etc/default/grub").write_text(
        (root / "etc/default/grub").read_text() + 'GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"\n'
    ),
    "a new grub.d file": lambda root: (root / "etc/default/grub.d/99-vendor.cfg").write_text(
        'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX pci=noacpi"\n'
    ),
    "grub.cfg rewritten": lambda root: (root / "boot/grub/grub.cfg").write_text("set default=0\n"),
    "a grubenv appearing": lambda root: (root / "boot/grub/grubenv").write_text(
        "# GRUB Environment Block\nsaved_entry=1\n"
    ),
    "a reboot into another command line": lambda root: (root / "proc/cmdline").write_text(
        RUNNING_NEW + "\n"
    ),
    "a reboot into the same command line": lambda root: (
        root / "proc/sys/kernel/random/boot_id"
    ).write_text("boot-2\n"),
    "kernel-install's cmdline appearing": lambda root: (
        (root / "etc/kernel").mkdir()
        or (root / "etc/kernel/cmdline").write_text("root=UUID=1 ro pci=noacpi\n")
    ),
    "another OS release": lambda root: (root / "etc/os-release").write_text("ID=rocky\n"),
    "a grub.d entry that cannot be read": lambda root: (
        root / "etc/default/grub.d/broken.cfg"
    ).mkdir(),
    "a link retargeted": lambda root: (
        (root / "boot/grub/grub.cfg").rename(root / "boot/grub/grub.cfg.real")
        or (root / "boot/grub/grub.cfg").symlink_to("grub.cfg.missing")
    ),
}


@pytest.mark.parametrize("move", sorted(BOOT_MOVES))
def test_any_boot_file_or_the_boot_moving_takes_the_receipt_down(tmp_path: Path, move: str) -> None:
    node = installed(tmp_path)
    (node.root / "proc/sys/kernel/random").mkdir(parents=True)
    (node.root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    kept(node)
    assert kept(node)[1] == "written"
    BOOT_MOVES[move](node.root)
    assert lingbot_fleet.node.receipts.unchanged(reading(node), "d1", 1_800_000_000.0) == (
        "the node's boot_state changed since the receipt"
    )


def test_the_same_text_written_again_keeps_the_receipt(tmp_path: Path) -> None:
    node = installed(tmp_path)
    kept(node)
    assert kept(node)[1] == "written"
    grub = node.root / "etc/default/grub"
    text = grub.read_text()
    grub.unlink()
    grub.write_text(text)
    assert lingbot_fleet.node.receipts.unchanged(reading(node), "d1", 1_800_000_000.0) is None


def test_a_receipt_without_a_result_is_not_answered_from() -> None:
    assert lingbot_fleet.node.receipts.replay({"data": {}}) is None
    assert lingbot_fleet.node.receipts.replay({"data": {"result": "x"}}) is None
    assert lingbot_fleet.node.receipts.replay({"data": {"result": {"changed": False}}}) == {
        "changed": False,
        "receipt": "stands",
    }


def test_a_call_without_a_digest_writes_no_receipt(tmp_path: Path) -> None:
    node = installed(tmp_path)
    configure(node)
    assert kept(node, digest=None)[1].startswith("none")
    assert not (node.root / RECEIPT).exists()


def run_playbook_on(node: Node) -> dict[str, Any]:
    """gpu_facts (with the receipts) then kernel_cmdline on the node, through real Ansible
    and both action plugins; kernel_cmdline's result."""
    tasks = [
        {
            "name": "Read the node",
            "gpu_facts": {
                "root": str(node.root),
                "use_nvml": False,
                "nvidia_smi": "/nonexistent/nvidia-smi",
                "receipts": True,
            },
        },
        {
            "name": "Configure the kernel command line",
            "kernel_cmdline": {
                "present": {"iommu": "pt"},
                "absent": ["pci=noacpi"],
                "root": str(node.root),
                "update_bootloader": False,
                "backup_dir": "/var/backup",
            },
        },
    ]
    library = [LIBRARY, REPO / "roles" / "gpu_facts" / "library"]
    workdir = node.root.parent / "run"
    workdir.mkdir(exist_ok=True)
    done = run_playbook(workdir, tasks, library=library)
    assert done.rc == 0, done.stdout[-3000:]
    [configured] = done.results("localhost", action="kernel_cmdline")
    return configured.result


def test_real_ansible_answers_a_converged_node_from_its_receipt(tmp_path: Path) -> None:
    node = installed(tmp_path)
    first = run_playbook_on(node)
    assert first["changed"] is True and first["receipt"] == "none"
    # The first call that changes nothing keeps its result; the next run is answered with it.
    second = run_playbook_on(node)
    assert second["changed"] is False and second["receipt"] == "written"
    third = run_playbook_on(node)
    assert third["receipt"] == "stands" and third["changed"] is False
    # Every key of the module's own answer (Ansible's echo of the arguments aside).
    second.pop("invocation")
    assert {**third, "receipt": "written"} == second
    assert third["configured"] == first["configured"]
    assert third["ansible_facts"]["kernel_cmdline_reboot_required"] is True
    # A hand edit that puts pci=noacpi back: the module runs and takes it out again.
    grub = node.root / "etc/default/grub"
    grub.write_text(grub.read_text() + 'GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"\n')
    fourth = run_playbook_on(node)
    # The module drops the receipt before it changes anything; none is kept after a change.
    assert fourth["changed"] is True and fourth["receipt"] == "none"
    assert not (node.root / RECEIPT).exists()
    assert grub.read_text().endswith('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')


def test_real_ansible_refuses_a_receipt_digest_in_the_task(tmp_path: Path) -> None:
    node = installed(tmp_path)
    result = run_ansible(node, receipt_digest="0" * 64)
    assert result["msg"] == "kernel_cmdline: receipt_digest is set by the action plugin"
