"""The audit's split: what the node reads, completed on the controller, equals reading and
parsing on the node itself, for boot files and generations of every shape, damage included."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lingbot_fleet.audit.node_document import complete_node, kernel_section
from lingbot_fleet.boot.bootfiles import BootFileError, read_boot_files
from lingbot_fleet.boot.driver_modules import read_kernel_modules
from lingbot_fleet.facts.audit_reading import kernel_files, read_node
from lingbot_fleet.node import generations
from lingbot_fleet.node.generation_snapshot import SnapshotReader, read_generations

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "tests" / "unit" / "grub_samples"
GDIR = "/var/lib/lingbot-fleet/generations"


def sent(data: Any) -> Any:
    """As the module's JSON result brings it to the controller."""
    return json.loads(json.dumps(data))


def grubenv(**values: str) -> str:
    body = "# GRUB Environment Block\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    return body + "#" * (1024 - len(body))


def bls_entry(version: str, options: str) -> str:
    return (
        f"title Linux ({version})\nversion {version}\nlinux /vmlinuz-{version}\n"
        f"options {options}\nid rhel-{version}\n"
    )


def lay_out(root: Path, files: dict[str, str], links: dict[str, str] | None = None) -> str:
    for path, text in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    for path, target in (links or {}).items():
        link = root / path.lstrip("/")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(target)
    return str(root)


DEBIAN = {
    "/proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 root=UUID=1 ro quiet\n",
    "/etc/default/grub": 'GRUB_DEFAULT=saved\r\nGRUB_CMDLINE_LINUX="pci=noacpi"\r\n',
    "/etc/default/grub.d/lingbot-fleet.cfg": 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"\n',
    "/etc/default/grub.d/.hidden.cfg": 'GRUB_CMDLINE_LINUX="hidden=1"\n',
    "/boot/grub/grub.cfg": (SAMPLES / "debian12-saved.grub.cfg")
    .read_text()
    .replace("@DEFAULT@", "${saved_entry}"),
    "/boot/grub/grubenv": grubenv(
        saved_entry="gnulinux-advanced-1>gnulinux-6.1.0-17-amd64-advanced-1"
    ),
}
UBUNTU = {
    "/proc/cmdline": "BOOT_IMAGE=/boot/vmlinuz-6.8.0-31-generic root=UUID=1 ro quiet splash "
    "vt.handoff=7\n",
    "/etc/default/grub": 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n',
    "/boot/grub/grub.cfg": (SAMPLES / "ubuntu2404.grub.cfg").read_text(),
}
RHEL8_ENTRY = "/boot/loader/entries/4c1a-4.18.0-513.el8.x86_64.conf"
RHEL8 = {
    "/proc/cmdline": "BOOT_IMAGE=(hd0,gpt2)/vmlinuz-4.18.0-513.el8.x86_64 root=/dev/rhel ro\n",
    "/etc/default/grub": 'GRUB_CMDLINE_LINUX="root=/dev/rhel ro"\n',
    "/boot/grub2/grub.cfg": (SAMPLES / "rhel8.grub.cfg").read_text(),
    RHEL8_ENTRY: bls_entry("4.18.0-513.el8.x86_64", "$kernelopts $tuned_params"),
    "/boot/loader/entries/4c1a-4.18.0-477.el8.x86_64.conf": bls_entry(
        "4.18.0-477.el8.x86_64", "root=/dev/rhel ro pci=noacpi"
    ),
    "/boot/loader/entries/.4c1a-9.9.9.conf": bls_entry("9.9.9", "dot=entry"),
    # RHEL 8 on UEFI: grubenv is a link into the EFI system partition.
    "/boot/efi/EFI/redhat/grubenv": grubenv(
        saved_entry="4c1a-4.18.0-513.el8.x86_64", kernelopts="root=/dev/rhel ro iommu=pt"
    ),
}
RHEL8_LINKS = {"/boot/grub2/grubenv": "../efi/EFI/redhat/grubenv"}

BOOT_CASES = {
    "debian: saved entry, CRLF defaults, grub.d drop-in and a dot file": (DEBIAN, {}),
    "ubuntu: vt_handoff decided at boot": (UBUNTU, {}),
    "rhel8: BLS, kernelopts from a grubenv linked into the ESP": (RHEL8, RHEL8_LINKS),
    "rhel8: the ESP not mounted (a link to nothing), /boot/grub/grubenv instead": (
        {
            **{k: v for k, v in RHEL8.items() if not k.startswith("/boot/efi")},
            "/boot/grub/grubenv": grubenv(saved_entry="4c1a-4.18.0-477.el8.x86_64"),
        },
        RHEL8_LINKS,
    ),
    "a grubenv link to a directory is passed over": (
        {**{k: v for k, v in RHEL8.items() if not k.startswith("/boot/efi")}},
        {"/boot/grub2/grubenv": "../loader"},
    ),
    "a container: no boot files at all": ({"/proc/cmdline": "quiet\n"}, {}),
    "no /proc/cmdline, grub defaults only": ({"/etc/default/grub": 'GRUB_CMDLINE_LINUX="a"\n'}, {}),
}


@pytest.mark.parametrize("case", list(BOOT_CASES))
def test_the_kernel_section_is_the_same_read_on_the_node_or_from_its_files(
    tmp_path: Path, case: str
) -> None:
    files, links = BOOT_CASES[case]
    root = lay_out(tmp_path / "node", files, links)
    on_node = kernel_section(root, "GenuineIntel", read_kernel_modules(root))
    completed = complete_node(
        sent({"kernel": {**kernel_files(root), "cpu_vendor": "GenuineIntel"}})
    )
    assert completed["kernel"] == on_node
    assert on_node["next_boot"] is not None or "/boot/grub/grub.cfg" not in files


def test_boot_files_that_cannot_be_read_name_themselves(tmp_path: Path) -> None:
    root = lay_out(tmp_path, {"/proc/cmdline": "quiet\n"})
    (tmp_path / "boot/grub/grub.cfg").mkdir(parents=True)
    with pytest.raises(BootFileError, match=r"boot/grub/grub\.cfg is a directory, not a file"):
        read_boot_files(root)
    shutil.rmtree(tmp_path / "boot/grub/grub.cfg")
    lay_out(tmp_path, {"/boot/grub/grub.cfg": "x" * ((1 << 20) + 1)})
    with pytest.raises(BootFileError, match=r"larger than 1048576 bytes"):
        read_boot_files(root)
    # The node's document says so in its kernel section; the others still come back.
    node = read_node(root=root, use_nvml=False, smi_command=["/nonexistent/nvidia-smi"])
    assert node["kernel"]["error"].startswith("BootFileError: ")
    assert complete_node(sent(node))["kernel"] == node["kernel"]
    assert complete_node(sent(node))["generations"] == []


# --- generations ------------------------------------------------------------------------


def make_generations(root: Path) -> None:
    """Two generations: a grub file and a unit changed, and a second edit of the grub file."""
    grub = root / "etc/default/grub"
    unit = root / "etc/systemd/system/lingbot@a.service"
    grub.parent.mkdir(parents=True)
    unit.parent.mkdir(parents=True)
    grub.write_text('GRUB_CMDLINE_LINUX=""\n')
    for run_id, edits in (
        ("run-1", {grub: 'GRUB_CMDLINE_LINUX="iommu=pt"\n', unit: "[Service]\n"}),
        ("run-2", {grub: 'GRUB_CMDLINE_LINUX="iommu=pt quiet"\n'}),
    ):
        paths = ["/" + str(path.relative_to(root)) for path in edits]
        generations.record_before(GDIR, run_id, paths, str(root))
        for path, text in edits.items():
            path.write_text(text)
        generations.commit(GDIR, run_id, {"by": "test"}, root=str(root))


def saved_copy(root: Path, number: int) -> Path:
    return next((root / GDIR.lstrip("/") / str(number) / "files").rglob("grub"))


def damage(root: Path, how: str) -> None:
    base = root / GDIR.lstrip("/")
    if how == "manifest not JSON":
        (base / "1/manifest.json").write_text("{")
    elif how == "manifest not UTF-8":
        (base / "1/manifest.json").write_bytes(b'{"schema": "\xff"}')
    elif how == "manifest a directory":
        (base / "1/manifest.json").unlink()
        (base / "1/manifest.json").mkdir()
    elif how == "manifest missing":
        (base / "2/manifest.json").unlink()
    elif how == "saved copy missing":
        saved_copy(root, 1).unlink()
    elif how == "saved copy altered":
        saved_copy(root, 2).write_text("someone else's\n")
    elif how == "saved copy a directory":
        copy = saved_copy(root, 1)
        copy.unlink()
        copy.mkdir()
    elif how == "saved copy a link to nothing":
        copy = saved_copy(root, 1)
        copy.unlink()
        copy.symlink_to("/nonexistent")
    elif how == "no generations directory":
        shutil.rmtree(base)
    elif how == "generations directory a file":
        shutil.rmtree(base)
        base.write_text("")
    elif how == "a stray directory and a pending run":
        (base / "07").mkdir()
        (base / "pending" / "run-9").mkdir(parents=True)


DAMAGE = [
    "intact",
    "manifest not JSON",
    "manifest not UTF-8",
    "manifest a directory",
    "manifest missing",
    "saved copy missing",
    "saved copy altered",
    "saved copy a directory",
    "saved copy a link to nothing",
    "no generations directory",
    "generations directory a file",
    "a stray directory and a pending run",
]


@pytest.mark.parametrize("how", DAMAGE)
def test_generations_checked_from_the_node_reading_equal_the_node_checking_them(
    tmp_path: Path, how: str
) -> None:
    root = tmp_path / "node"
    make_generations(root)
    damage(root, how)
    try:
        on_node: Any = generations.list_generations(GDIR, str(root))
    except OSError as error:
        on_node = f"raises {error}"
    snapshot = sent(read_generations(GDIR, str(root)))
    try:
        completed: Any = generations.list_generations(GDIR, str(root), SnapshotReader(snapshot))
    except OSError as error:
        completed = f"raises {error}"
    assert completed == on_node
    if how == "intact":
        assert [(row["generation"], row["ok"]) for row in on_node] == [(1, True), (2, True)]
    elif how not in ("no generations directory", "generations directory a file"):
        assert any(not row["ok"] for row in on_node) or how.startswith("a stray")


def test_the_node_module_imports_no_parser_and_no_generations_code() -> None:
    """What the audit's node module loads on every node: the facts and the readers only."""
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1]); import lingbot_fleet.facts.audit_reading; "
        "import json; print(json.dumps(sorted(m for m in sys.modules if 'lingbot' in m)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(REPO / "python")],
        capture_output=True,
        text=True,
        check=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    loaded = set(json.loads(done.stdout))
    assert "lingbot_fleet.facts" in loaded
    assert loaded.isdisjoint(
        {
            "lingbot_fleet.boot.grub",
            "lingbot_fleet.boot.cmdline",
            "lingbot_fleet.node.generations",
            "lingbot_fleet.lingbot.layout",
        }
    ), loaded
