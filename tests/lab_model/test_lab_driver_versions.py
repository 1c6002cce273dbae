"""The lab's driver version file and fabric manager: the firmware writes the loaded module's
/proc/driver/nvidia/version, nv-fabricmanager says its version and refuses to start as the
real one does, the faults fabric_manager_version / fabric_manager_down, and the lab manager
installs the fabric manager only on NVSwitch profiles."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from labmodel_support import read_profile_yaml, run_tool

from lingbot_fleet.lab import layout, manager
from lingbot_lab import firmware
from lingbot_lab.driver_proc import version_file_text
from lingbot_lab.fabric_manager import start_problem
from lingbot_lab.hwstate import compute_state
from lingbot_lab.profile import validate_profile

H100 = "h100-sxm-nvswitch"
MODULE_TEXT = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14) \n"
)


def install(root: Path, name: str, faults: list[dict[str, Any]] | None = None) -> None:
    raw = read_profile_yaml(name)
    if faults is not None:
        raw["faults"] = faults
    path = root / "opt/lingbot-lab/profile.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(raw), encoding="utf-8")


def boot(root: Path) -> Path:
    result = run_tool("lingbot-lab-firmware", root, "--no-mount")
    assert result.returncode == 0, result.stderr
    return root / "run/lingbot-lab"


# --- /proc/driver/nvidia/version ------------------------------------------------------------


def test_the_firmware_writes_the_loaded_modules_version_file(tmp_path: Path) -> None:
    install(tmp_path, "a6000-phb")
    lab = boot(tmp_path)
    assert (lab / "driver-version").read_text() == MODULE_TEXT
    # The directory bound over /proc/driver holds the same file.
    assert (lab / "proc-driver/nvidia/version").read_text() == MODULE_TEXT
    assert sorted(p.name for p in (lab / "proc-driver").rglob("*")) == ["nvidia", "version"]


def test_the_version_file_is_the_profiles_driver_not_its_libraries(tmp_path: Path) -> None:
    install(tmp_path, "a6000-phb", [{"kind": "driver_library_mismatch", "library_version": "1.2"}])
    raw = json.loads((tmp_path / "opt/lingbot-lab/profile.json").read_text())
    raw["driver"] = {"version": "535.161.08"}
    (tmp_path / "opt/lingbot-lab/profile.json").write_text(json.dumps(raw))
    lab = boot(tmp_path)
    assert (lab / "driver-version").read_text() == version_file_text("535.161.08")
    assert (
        (lab / "driver-version")
        .read_text()
        .startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  ")
    )


def test_without_the_driver_there_is_no_version_file_and_nothing_to_mount(
    tmp_path: Path,
) -> None:
    install(tmp_path, "a6000-phb")
    lab = boot(tmp_path)
    assert (lab / "driver-version").exists()
    install(tmp_path, "a6000-phb", [{"kind": "driver_not_loaded"}])
    boot(tmp_path)
    assert not (lab / "driver-version").exists()
    assert not (lab / "proc-driver").exists()
    # The optional mount is skipped, not failed, when its source is absent.
    assert firmware.optional_bind_mount(lab / "proc-driver", "/proc/driver") is None


def test_the_optional_mount_of_proc_driver_is_listed_apart() -> None:
    assert firmware.OPTIONAL_BIND_MOUNTS == (("proc-driver", "/proc/driver"),)
    assert "/proc/driver" not in [target for _, target in firmware.BIND_MOUNTS]


def test_an_optional_mount_whose_target_cannot_be_made_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "source"
    source.mkdir()
    blocker = tmp_path / "file"
    blocker.write_text("")
    problem = firmware.optional_bind_mount(source, str(blocker / "below"))
    assert problem is not None
    assert problem.startswith(f"{blocker / 'below'} cannot be made, {source} is not mounted: ")


# --- nv-fabricmanager -----------------------------------------------------------------------


def test_nv_fabricmanager_says_the_drivers_version(tmp_path: Path) -> None:
    install(tmp_path, H100)
    for flag in ("--version", "-v"):
        result = run_tool("nv-fabricmanager", tmp_path, flag)
        assert (result.returncode, result.stdout) == (0, "Fabric Manager version is : 550.54.15\n")


def test_a_fabric_manager_of_another_version_says_it_and_refuses_to_start(
    tmp_path: Path,
) -> None:
    install(tmp_path, H100, [{"kind": "fabric_manager_version", "version": "550.90.07"}])
    result = run_tool("nv-fabricmanager", tmp_path, "--version")
    assert result.stdout == "Fabric Manager version is : 550.90.07\n"
    boot(tmp_path)
    result = run_tool("nv-fabricmanager", tmp_path, "-c", "/usr/share/nvidia/nvswitch/x.cfg")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "nv-fabricmanager: fabric manager NVIDIA GPU driver interface version 550.90.07 don't "
        "match with driver version 550.54.15. Please update with matching NVIDIA driver "
        "package.",
        "nv-fabricmanager: NVIDIA Fabric Manager failed to start",
    ]


def test_the_fabric_manager_down_refuses_to_start(tmp_path: Path) -> None:
    install(tmp_path, H100, [{"kind": "fabric_manager_down"}])
    boot(tmp_path)
    result = run_tool("nv-fabricmanager", tmp_path, "-c", "/usr/share/nvidia/nvswitch/x.cfg")
    assert result.returncode == 1
    assert "lab fault fabric_manager_down" in result.stderr


def test_the_fabric_manager_starts_at_the_drivers_version_only_with_the_driver(
    tmp_path: Path,
) -> None:
    install(tmp_path, H100)
    profile = validate_profile(read_profile_yaml(H100))
    assert start_problem(str(tmp_path), profile) == (
        "failed to open the NVIDIA driver: the NVIDIA kernel module is not loaded"
    )
    boot(tmp_path)
    assert start_problem(str(tmp_path), profile) is None


def test_a_fabric_manager_of_another_version_leaves_the_fabric_not_started() -> None:
    raw = read_profile_yaml(H100)
    raw["faults"] = [{"kind": "fabric_manager_version", "version": "550.90.07"}]
    state = compute_state(validate_profile(raw), "ro")
    assert {gpu["fabric_state"] for gpu in state["gpus"]} == {1}
    state = compute_state(validate_profile(read_profile_yaml(H100)), "ro")
    assert {gpu["fabric_state"] for gpu in state["gpus"]} == {3}


@pytest.mark.parametrize(
    ("profile_name", "fault", "message"),
    [
        (
            "a6000-phb",
            {"kind": "fabric_manager_down"},
            "profile a6000-phb: faults[0].kind: fabric_manager_down on a profile without "
            "NVSwitches (no GPU has nvlinks to nvswitch), where no fabric manager runs; fix: "
            "give the fault to an NVSwitch profile (h100-sxm-nvswitch)",
        ),
        (
            H100,
            {"kind": "fabric_manager_version"},
            "profile h100-sxm-nvswitch: faults[0].version: missing; fix: set version",
        ),
        (
            H100,
            {"kind": "fabric_manager_version", "version": 550.9},
            "profile h100-sxm-nvswitch: faults[0].version: 550.9 is not a driver version; "
            'fix: write the fabric manager\'s version in quotes, e.g. "550.90.07"',
        ),
        (
            H100,
            {"kind": "fabric_manager_version", "version": "550.54.15"},
            "profile h100-sxm-nvswitch: faults[0].version: 550.54.15 is the driver's own "
            "version (550.54.15); fix: give the fabric manager another version, or leave the "
            "fault out",
        ),
    ],
)
def test_fabric_manager_faults_are_validated(
    profile_name: str, fault: dict[str, Any], message: str
) -> None:
    raw = copy.deepcopy(read_profile_yaml(profile_name))
    raw["faults"] = [fault]
    with pytest.raises(ValueError) as raised:
        validate_profile(raw)
    assert str(raised.value) == message


# --- the lab manager ------------------------------------------------------------------------


def test_the_fabric_manager_is_installed_and_enabled_on_nvswitch_profiles_only(
    tmp_path: Path,
) -> None:
    h100 = validate_profile(read_profile_yaml(H100))
    manager._install_fabric_manager(h100, tmp_path)
    daemon = tmp_path / "usr/bin/nv-fabricmanager"
    unit = tmp_path / "lib/systemd/system/nvidia-fabricmanager.service"
    wants = tmp_path / layout.FABRIC_MANAGER_WANTS
    assert daemon.stat().st_mode & 0o777 == 0o755
    assert "ExecStart=/usr/bin/nv-fabricmanager -c " in unit.read_text()
    assert "Type=forking" in unit.read_text()
    assert str(wants.readlink()) == "/lib/systemd/system/nvidia-fabricmanager.service"
    manager._install_fabric_manager(validate_profile(read_profile_yaml("a6000-phb")), tmp_path)
    assert not daemon.exists()
    assert not unit.exists()
    assert not wants.is_symlink()
