"""The NVIDIA module of the next boot's kernel, as each packaging lays it out
(boot/driver_modules.py): what kernel_cmdline's reboot guard and the audit read."""

from __future__ import annotations

from pathlib import Path

import pytest

from lingbot_fleet.audit.evaluate import next_boot_driver_findings
from lingbot_fleet.boot.driver_modules import (
    kernel_release,
    next_boot_driver,
    read_kernel_modules,
)

RELEASE = "6.8.0-31-generic"


def install(root: Path, release: str, files: dict[str, str | None], dep: list[str] | None) -> None:
    """Files under /lib/modules/<release> (None: an empty file), with the modules.dep that
    lists ``dep`` (None: no modules.dep at all)."""
    modules = root / "lib/modules" / release
    modules.mkdir(parents=True, exist_ok=True)
    for path, link in files.items():
        target = modules / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if link is None:
            target.write_bytes(b"\x7fELF")
        else:
            target.symlink_to(link)
    if dep is not None:
        (modules / "modules.dep").write_text("".join(f"{entry}: \n" for entry in dep))


LAYOUTS = {
    "debian dkms: nvidia-current": (["updates/dkms/nvidia-current.ko"], "built"),
    "debian dkms, the tesla branch": (["updates/dkms/nvidia-tesla-535.ko"], "built"),
    "ubuntu 24.04 dkms, zstd": (["updates/dkms/nvidia.ko.zst"], "built"),
    "ubuntu precompiled package": (["kernel/nvidia-550srv/nvidia.ko"], "built"),
    "rhel kmod / dkms, xz": (["extra/nvidia.ko.xz"], "built"),
    "nvidia .run installer": (["kernel/drivers/video/nvidia.ko"], "built"),
    "only the companions were built": (
        ["updates/dkms/nvidia-uvm.ko", "updates/dkms/nvidia-modeset.ko"],
        "missing",
    ),
    "other drivers named nvidia*": (
        [
            "kernel/drivers/video/fbdev/nvidia/nvidiafb.ko",
            "kernel/drivers/platform/x86/nvidia-wmi-ec-backlight.ko",
        ],
        "missing",
    ),
    "the kernel's own tree is not where it is installed": (
        ["kernel/drivers/gpu/nvidia.ko"],
        "missing",
    ),
}


@pytest.mark.parametrize("case", list(LAYOUTS))
def test_each_packaging_of_the_module_is_found(tmp_path: Path, case: str) -> None:
    paths, state = LAYOUTS[case]
    install(tmp_path, RELEASE, dict.fromkeys(paths), dep=paths)
    driver = next_boot_driver(f"/boot/vmlinuz-{RELEASE}", read_kernel_modules(str(tmp_path)))
    assert driver["state"] == state
    assert driver["kernel"] == RELEASE
    assert (driver["problem"] is None) == (state == "built")


def test_a_weak_updates_link_counts_when_its_target_is_there(tmp_path: Path) -> None:
    """RHEL's kABI links: weak-updates of a new kernel point at an older kernel's module."""
    old, new = "5.14.0-362.el9.x86_64", "5.14.0-427.el9.x86_64"
    install(tmp_path, old, {"extra/nvidia.ko.xz": None}, dep=["extra/nvidia.ko.xz"])
    link = f"/lib/modules/{old}/extra/nvidia.ko.xz"
    install(tmp_path, new, {"weak-updates/nvidia.ko.xz": link}, dep=["weak-updates/nvidia.ko.xz"])
    kernels = read_kernel_modules(str(tmp_path))
    assert next_boot_driver(f"/vmlinuz-{new}", kernels)["state"] == "built"
    (tmp_path / "lib/modules" / old / "extra/nvidia.ko.xz").unlink()
    kernels = read_kernel_modules(str(tmp_path))
    assert next_boot_driver(f"/vmlinuz-{new}", kernels)["state"] == "missing"


def test_a_module_depmod_did_not_index_is_not_loaded(tmp_path: Path) -> None:
    install(tmp_path, RELEASE, {"updates/dkms/nvidia.ko": None}, dep=["kernel/fs/ext4.ko"])
    driver = next_boot_driver(f"/boot/vmlinuz-{RELEASE}", read_kernel_modules(str(tmp_path)))
    assert driver["state"] == "not_indexed"
    assert driver["fix"] == f"run depmod -a {RELEASE}"
    assert f"/lib/modules/{RELEASE}/updates/dkms/nvidia.ko" in driver["problem"]


def test_without_modules_dep_the_module_file_decides(tmp_path: Path) -> None:
    install(tmp_path, RELEASE, {"updates/dkms/nvidia.ko": None}, dep=None)
    kernels = read_kernel_modules(str(tmp_path))
    assert kernels == {RELEASE: {"nvidia": ["updates/dkms/nvidia.ko"], "indexed": None}}
    assert next_boot_driver(f"/boot/vmlinuz-{RELEASE}", kernels)["state"] == "built"


def test_a_kernel_without_a_modules_directory_is_missing(tmp_path: Path) -> None:
    install(tmp_path, RELEASE, {"updates/dkms/nvidia.ko": None}, dep=None)
    driver = next_boot_driver("/boot/vmlinuz-6.8.0-40-generic", read_kernel_modules(str(tmp_path)))
    assert driver["state"] == "missing"
    assert "6.8.0-40-generic has no modules directory" in driver["problem"]


@pytest.mark.parametrize(
    ("image", "release"),
    [
        ("/boot/vmlinuz-6.1.0-18-amd64", "6.1.0-18-amd64"),
        ("/vmlinuz-5.14.0-362.24.1.el9_3.x86_64", "5.14.0-362.24.1.el9_3.x86_64"),
        ("(hd0,gpt2)/vmlinuz-4.18.0-513.el8.x86_64", "4.18.0-513.el8.x86_64"),
        ("/boot/vmlinuz", None),
        ("/boot/vmlinuz-", None),
        ("/boot/vmlinuz-$version", None),
        (None, None),
    ],
)
def test_the_release_comes_from_the_image_name(image: str | None, release: str | None) -> None:
    assert kernel_release(image, "/nonexistent") == release


def test_an_unversioned_image_link_is_followed_on_the_node(tmp_path: Path) -> None:
    (tmp_path / "boot").mkdir()
    (tmp_path / "boot/vmlinuz").symlink_to(f"vmlinuz-{RELEASE}")
    assert kernel_release("/boot/vmlinuz", str(tmp_path)) == RELEASE
    assert next_boot_driver("/boot/vmlinuz", {}, str(tmp_path))["state"] == "missing"


def test_the_audit_finds_the_next_boot_losing_the_driver_only_with_gpus(tmp_path: Path) -> None:
    install(tmp_path, RELEASE, {}, dep=[])
    driver = next_boot_driver(f"/boot/vmlinuz-{RELEASE}", read_kernel_modules(str(tmp_path)))
    state = {"next_boot_driver": driver, "next_boot_source": "/boot/grub/grub.cfg"}
    (finding,) = next_boot_driver_findings(state, gpus_on_bus=2)
    assert finding.code == "NEXT_BOOT_LOSES_GPU_DRIVER"
    assert finding.severity == "error"
    assert finding.message.startswith(
        f"next boot would lose the driver of 2 GPU(s): the next boot's kernel {RELEASE} has "
        "no NVIDIA kernel module"
    )
    assert finding.fix.startswith(f"build it (dkms autoinstall -k {RELEASE}")
    assert finding.evidence["kernel"] == RELEASE
    assert next_boot_driver_findings(state, gpus_on_bus=0) == []


def test_the_audit_notes_a_next_boot_kernel_it_cannot_name() -> None:
    state = {"next_boot_driver": next_boot_driver("/boot/vmlinuz", {}, "/nonexistent")}
    (finding,) = next_boot_driver_findings(state, gpus_on_bus=1)
    assert (finding.code, finding.severity) == ("NEXT_BOOT_DRIVER_UNKNOWN", "info")
