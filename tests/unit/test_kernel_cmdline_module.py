"""The kernel_cmdline module: run logic on a temp root, and through real ansible."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import lingbot_fleet
import lingbot_fleet.cmdline
import lingbot_fleet.generations
import lingbot_fleet.grub

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "roles" / "kernel_cmdline" / "library"
SAMPLES = Path(__file__).parent / "grub_samples"
DROPIN = "etc/default/grub.d/lingbot-fleet.cfg"
DROPIN_TEXT = (
    "# Managed by lingbot-fleet (role kernel_cmdline): kernel parameters it adds.\n"
    "# Set them in the inventory (kernel_cmdline_present), not here.\n"
    'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n'
)


def load_module() -> ModuleType:
    import ansible.module_utils

    sys.modules.setdefault("ansible.module_utils.lingbot_fleet", lingbot_fleet)
    sys.modules.setdefault("ansible.module_utils.lingbot_fleet.cmdline", lingbot_fleet.cmdline)
    sys.modules.setdefault("ansible.module_utils.lingbot_fleet.grub", lingbot_fleet.grub)
    sys.modules.setdefault(
        "ansible.module_utils.lingbot_fleet.generations", lingbot_fleet.generations
    )
    ansible.module_utils.lingbot_fleet = lingbot_fleet  # type: ignore[attr-defined]
    spec = importlib.util.spec_from_file_location("kernel_cmdline", LIBRARY / "kernel_cmdline.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernel_cmdline"] = module
    spec.loader.exec_module(module)
    return module


kc = load_module()


class FakeNode:
    """Commands of a node: sh is real, the bootloader tools are recorded."""

    def __init__(self, grubby_info: str = "") -> None:
        self.calls: list[list[str]] = []
        self.grubby_info = grubby_info

    def run(self, argv: list[str], stdin_text: str | None) -> tuple[int, str, str]:
        self.calls.append(argv)
        if argv[0] == "/bin/sh":
            done = subprocess.run(
                argv, check=False, input=stdin_text, capture_output=True, text=True
            )
            return done.returncode, done.stdout, done.stderr
        if argv[-1] == "--info=ALL":
            return 0, self.grubby_info, ""
        return 0, "", ""


def find_all(name: str) -> str | None:
    return {"sh": "/bin/sh", "update-grub": "/usr/sbin/update-grub", "grubby": "/usr/sbin/grubby"}[
        name
    ]


def make_root(tmp_path: Path, grub_text: str, running: str, vendor: str = "AuthenticAMD") -> Path:
    root = tmp_path / "node"
    (root / "etc/default/grub.d").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "etc/default/grub").write_bytes(grub_text.encode())
    (root / "proc/cmdline").write_text(running + "\n")
    (root / "proc/cpuinfo").write_text(f"processor\t: 0\nvendor_id\t: {vendor}\n")
    return root


def params(root: Path, **overrides: Any) -> dict[str, Any]:
    values = {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "iommu_vendor_switch": False,
        "bootloader": "grub_d",
        "dropin_name": "lingbot-fleet",
        "update_bootloader": True,
        "backup_dir": "/var/backup",
        "generation_run_id": None,
        "generations_dir": "/var/lib/lingbot-fleet/generations",
        "root": str(root),
        "verify": False,
        "verify_gpu_numa": True,
    }
    values.update(overrides)
    return values


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def configure(root: Path, node: FakeNode, *, check_mode: bool = False, **overrides: Any) -> dict:
    actions = kc.Actions(
        root=str(root),
        check_mode=check_mode,
        backup_dir=overrides.get("backup_dir", "/var/backup"),
        runner=node.run,
        stamp="20250101T000000",
        generation_run_id=overrides.get("generation_run_id"),
    )
    return kc.configure(params(root, **overrides), actions, find_all)


DEBIAN12 = (SAMPLES / "debian12.grub").read_text()
DEBIAN12_AFTER = (SAMPLES / "debian12.expected").read_text()
RUNNING_OLD = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro quiet pci=noacpi"
RUNNING_NEW = "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro iommu=pt quiet"


def test_first_run_edits_backs_up_and_updates_grub(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    node = FakeNode()
    result = configure(root, node)
    assert result["changed"] is True
    assert result["files"] == ["/etc/default/grub", "/" + DROPIN]
    assert result["configured"] == ["iommu=pt", "quiet"]
    assert result["running"] == RUNNING_OLD.split()
    assert result["reboot_required"] is True
    assert result["missing_running"] == ["iommu=pt"]
    assert result["unwanted_running"] == ["pci=noacpi"]
    assert result["commands"] == [["/usr/sbin/update-grub"]]
    backup = f"{root}/var/backup/20250101T000000/etc/default/grub"
    assert result["backups"] == [backup]
    assert Path(backup).read_text() == DEBIAN12
    assert (root / "etc/default/grub").read_text() == DEBIAN12_AFTER
    assert (root / DROPIN).read_text() == DROPIN_TEXT
    assert oct((root / DROPIN).stat().st_mode & 0o777) == "0o644"
    assert node.calls == [["/bin/sh", "-n"], ["/bin/sh", "-n"], ["/usr/sbin/update-grub"]]
    assert result["diff"][0] == {
        "before_header": "/etc/default/grub",
        "after_header": "/etc/default/grub",
        "before": DEBIAN12,
        "after": DEBIAN12_AFTER,
    }
    assert result["diff"][1]["before_header"] == "/dev/null"


def test_second_run_is_unchanged_and_runs_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    configure(root, FakeNode())
    before = snapshot(root)
    node = FakeNode()
    result = configure(root, node)
    assert result["changed"] is False
    assert result["files"] == [] and result["commands"] == [] and result["diff"] == []
    assert result["reboot_required"] is True
    assert node.calls == []
    assert snapshot(root) == before


def test_check_mode_writes_nothing_and_reports_the_same(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    before = snapshot(root)
    node = FakeNode()
    result = configure(root, node, check_mode=True)
    assert snapshot(root) == before
    assert result["changed"] is True
    assert result["files"] == ["/etc/default/grub", "/" + DROPIN]
    assert result["commands"] == [["/usr/sbin/update-grub"]]
    assert result["configured"] == ["iommu=pt", "quiet"]
    assert result["diff"][0]["after"] == DEBIAN12_AFTER
    assert node.calls == [["/bin/sh", "-n"], ["/bin/sh", "-n"]]


def test_reboot_not_required_when_running_kernel_follows_policy(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_NEW)
    result = configure(root, FakeNode())
    assert result["reboot_required"] is False
    assert result["missing_running"] == [] and result["unwanted_running"] == []


def test_vendor_switch_comes_from_cpuinfo(tmp_path: Path) -> None:
    root = make_root(tmp_path, 'GRUB_CMDLINE_LINUX=""\n', RUNNING_NEW, vendor="GenuineIntel")
    result = configure(root, FakeNode(), iommu_vendor_switch=True)
    assert result["configured"] == ["iommu=pt", "intel_iommu=on"]
    assert result["missing_running"] == ["intel_iommu=on"]
    assert (
        (root / DROPIN)
        .read_text()
        .endswith('GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt intel_iommu=on"\n')
    )


def test_missing_update_grub_fails_before_writing(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    before = snapshot(root)
    actions = kc.Actions(str(root), False, "/var/backup", FakeNode().run)
    with pytest.raises(kc.ModuleError) as caught:
        kc.configure(params(root), actions, lambda name: "/bin/sh" if name == "sh" else None)
    assert caught.value.msg == (
        "update-grub was not found on the node (searched PATH and the sbin directories); "
        "nothing was written. Install grub2-common, or set update_bootloader to false to "
        "edit the files only"
    )
    assert snapshot(root) == before


@pytest.mark.parametrize(
    ("grub_text", "overrides", "error", "message"),
    [
        (
            DEBIAN12,
            {"present": {"iommu": "pt"}, "absent": ["iommu"]},
            lingbot_fleet.cmdline.PolicyError,
            "kernel parameter 'iommu' is asked to be absent while 'iommu=pt' is asked to be "
            "present; remove it from one of the two lists.",
        ),
        (
            DEBIAN12,
            {"absent": ["pci noacpi"]},
            lingbot_fleet.cmdline.PolicyError,
            "absent: malformed kernel parameter name 'pci noacpi'; a name is letters, digits, "
            "'_', '-' and '.', starting with a letter, digit or '_'. Fix the name in the policy.",
        ),
        (
            'GRUB_CMDLINE_LINUX="quiet pci=noacpi\n',
            {},
            lingbot_fleet.grub.GrubParseError,
            "/etc/default/grub:1: unbalanced double quote: the quote opened here is never "
            "closed. Fix: close the quote.",
        ),
    ],
)
def test_bad_input_writes_nothing(
    tmp_path: Path, grub_text: str, overrides: dict, error: type, message: str
) -> None:
    root = make_root(tmp_path, grub_text, RUNNING_OLD)
    before = snapshot(root)
    node = FakeNode()
    with pytest.raises(error) as caught:
        configure(root, node, **overrides)
    assert str(caught.value) == message
    assert snapshot(root) == before
    assert node.calls == []


def test_empty_present_removes_the_owned_dropin(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12_AFTER, RUNNING_NEW)
    (root / DROPIN).write_text(DROPIN_TEXT)
    result = configure(root, FakeNode(), present={})
    assert result["files"] == ["/" + DROPIN]
    assert not (root / DROPIN).exists()
    assert Path(f"{root}/var/backup/20250101T000000/{DROPIN}").read_text() == DROPIN_TEXT


GRUBBY_INFO = (
    'index=0\nkernel="/boot/vmlinuz-5.14.0-362.el9.x86_64"\n'
    'args="ro crashkernel=auto pci=noacpi,realloc rhgb quiet"\n'
    'root="/dev/mapper/rl-root"\nindex=1\nkernel="/boot/vmlinuz-0-rescue"\n'
    'args="ro crashkernel=auto rhgb quiet iommu=pt"\n'
)


def test_grubby_family_edits_default_grub_and_boot_entries(tmp_path: Path) -> None:
    grub_text = 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto pci=noacpi rhgb quiet"\n'
    root = make_root(tmp_path, grub_text, RUNNING_OLD)
    node = FakeNode(GRUBBY_INFO)
    result = configure(root, node, bootloader="grubby")
    assert (root / "etc/default/grub").read_text() == (
        'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto rhgb quiet iommu=pt"\n'
    )
    assert result["commands"] == [
        [
            "/usr/sbin/grubby",
            "--update-kernel=ALL",
            "--args=iommu=pt pci=realloc",
            "--remove-args=pci=noacpi,realloc",
        ]
    ]
    assert not (root / "etc/default/grub.d/lingbot-fleet.cfg").exists()


def test_grubby_family_second_run_is_unchanged(tmp_path: Path) -> None:
    grub_text = 'GRUB_CMDLINE_LINUX="rhgb quiet iommu=pt"\n'
    root = make_root(tmp_path, grub_text, RUNNING_NEW)
    info = 'kernel="/boot/vmlinuz-5"\nargs="ro rhgb quiet iommu=pt pci=realloc"\n'
    result = configure(root, FakeNode(info), bootloader="grubby")
    assert result["changed"] is False
    assert result["commands"] == []


# --- recording into the run's generation -----------------------------------------------

GENERATIONS = "var/lib/lingbot-fleet/generations"


def test_generation_run_id_records_files_instead_of_backing_up(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    result = configure(root, FakeNode(), generation_run_id="run-1")
    pending = root / GENERATIONS / "pending/run-1"
    assert result["backups"] == [str(pending / "files/etc/default/grub")]
    assert (pending / "files/etc/default/grub").read_text() == DEBIAN12
    assert not (root / "var/backup").exists()
    committed = lingbot_fleet.generations.commit(
        "/" + GENERATIONS, "run-1", {"playbook": "site.yml"}, root=str(root)
    )
    assert committed.generation == 1
    assert committed.changed_files == ["/etc/default/grub", "/" + DROPIN]
    plan = lingbot_fleet.generations.plan_rollback("/" + GENERATIONS, root=str(root))
    assert [(r.path, r.action) for r in plan.restores] == [
        ("/etc/default/grub", "write"),
        ("/" + DROPIN, "remove"),
    ]
    lingbot_fleet.generations.apply_rollback(plan, "/" + GENERATIONS, "rb", str(root))
    assert (root / "etc/default/grub").read_text() == DEBIAN12
    assert not (root / DROPIN).exists()


def test_generation_check_mode_records_nothing(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    before = snapshot(root)
    configure(root, FakeNode(), check_mode=True, generation_run_id="run-1")
    assert snapshot(root) == before


def test_grubby_family_records_the_boot_entries_before_grubby(tmp_path: Path) -> None:
    grub_text = 'GRUB_CMDLINE_LINUX="crashkernel=auto pci=noacpi rhgb quiet"\n'
    root = make_root(tmp_path, grub_text, RUNNING_OLD)
    entries = root / "boot/loader/entries"
    entries.mkdir(parents=True)
    (entries / "abc-5.14.0.conf").write_text("options ro pci=noacpi,realloc\n")
    (root / "boot/grub2").mkdir(parents=True)
    (root / "boot/grub2/grubenv").write_text("# GRUB Environment Block\n")
    configure(root, FakeNode(GRUBBY_INFO), bootloader="grubby", generation_run_id="run-1")
    manifest = json.loads((root / GENERATIONS / "pending/run-1/manifest.json").read_text())
    assert [entry["path"] for entry in manifest["files"]] == [
        "/etc/default/grub",
        "/boot/loader/entries/abc-5.14.0.conf",
        "/boot/grub2/grubenv",
    ]


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
    root = make_root(tmp_path, DEBIAN12, RUNNING_NEW)
    make_sysfs(root, "identity", "0")
    result = kc.verify(params(root, verify=True))
    assert result["problems"] == []
    assert result["evidence"] == {
        "cmdline": RUNNING_NEW,
        "iommu_group_types": {"18": "identity"},
        "gpus": [{"bdf": "0000:41:00.0", "numa_node": 0}],
    }


def test_verify_fails_with_every_problem(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    make_sysfs(root, "DMA-FQ", "-1")
    with pytest.raises(kc.ModuleError) as caught:
        kc.verify(params(root, verify=True))
    assert caught.value.msg == (
        "the running kernel does not follow the kernel command-line policy: iommu=pt is "
        "missing from /proc/cmdline; pci=noacpi is in /proc/cmdline; IOMMU group 18 has type "
        "'DMA-FQ', not 'identity', though iommu=pt is asked; GPU 0000:41:00.0 has numa_node "
        "-1 (the firmware's NUMA information is not in effect; pci=noacpi does this)"
    )
    assert caught.value.details["evidence"]["gpus"] == [{"bdf": "0000:41:00.0", "numa_node": -1}]


def test_verify_numa_check_can_be_turned_off(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_NEW)
    make_sysfs(root, "identity", "-1")
    assert kc.verify(params(root, verify=True, verify_gpu_numa=False))["problems"] == []


# --- through real ansible ----------------------------------------------------------------


def run_ansible(root: Path, *, check: bool = False, **overrides: Any) -> dict:
    args = {
        "present": {"iommu": "pt"},
        "absent": ["pci=noacpi"],
        "root": str(root),
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
            "ANSIBLE_LOCAL_TEMP": str(root.parent / "ansible-tmp"),
            "ANSIBLE_HOME": str(root.parent / "ansible-home"),
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
    done = subprocess.run(
        argv, check=False, env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    marker = done.stdout.find("localhost | ")
    _, separator, body = done.stdout[max(marker, 0) :].partition(" => ")
    assert marker >= 0 and separator, done.stderr + done.stdout
    return json.loads(body)


def test_real_ansible_check_then_apply_then_unchanged(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    before = snapshot(root)
    checked = run_ansible(root, check=True)
    assert checked["changed"] is True
    assert checked["files"] == ["/etc/default/grub", "/" + DROPIN]
    assert snapshot(root) == before
    applied = run_ansible(root)
    assert applied["changed"] is True
    assert applied["configured"] == ["iommu=pt", "quiet"]
    assert applied["reboot_required"] is True
    assert (root / "etc/default/grub").read_text() == DEBIAN12_AFTER
    assert (root / DROPIN).read_text() == DROPIN_TEXT
    again = run_ansible(root)
    assert again["changed"] is False
    assert again["files"] == []


def test_real_ansible_records_into_the_generation(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    applied = run_ansible(root, generation_run_id="run-1")
    pending = root / "var/lib/lingbot-fleet/generations/pending/run-1"
    assert applied["backups"] == [str(pending / "files/etc/default/grub")]
    assert (pending / "files/etc/default/grub").read_text() == DEBIAN12


def test_real_ansible_reports_a_bad_policy(tmp_path: Path) -> None:
    root = make_root(tmp_path, DEBIAN12, RUNNING_OLD)
    before = snapshot(root)
    result = run_ansible(root, absent=["iommu"])
    assert snapshot(root) == before
    assert result["changed"] is False
    assert result["msg"] == (
        "kernel parameter 'iommu' is asked to be absent while 'iommu=pt' is asked to be "
        "present; remove it from one of the two lists. Nothing was written."
    )
