"""nvidia-smi output against states computed by hwstate from every lab profile."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from lab_smi_support import REPO_ROOT, write_state
from test_smi_cli import run_smi
from test_smi_format import parse_topology_matrix

hwstate = pytest.importorskip("lingbot_lab.hwstate")
profile_module = pytest.importorskip("lingbot_lab.profile")

PROFILE_PATHS = sorted((REPO_ROOT / "lab" / "profiles").glob("*.yml"))
NOACPI_SUFFIX = " pci=noacpi"


def boot_cmdline(profile: dict[str, Any], extra: str = "") -> str:
    boot = profile["boot"]
    words = f"{boot['grub_cmdline_linux']} {boot['grub_cmdline_linux_default']}{extra}".split()
    return " ".join([f"BOOT_IMAGE=/boot/vmlinuz-{boot['kernel_version']}", "ro", *words])


def computed_state(path: Path, extra: str = "") -> dict[str, Any]:
    profile = profile_module.validate_profile(yaml.safe_load(path.read_text()))
    return hwstate.compute_state(profile, boot_cmdline(profile, extra))


pytestmark = pytest.mark.skipif(not PROFILE_PATHS, reason="no profiles in lab/profiles yet")


@pytest.fixture(params=PROFILE_PATHS, ids=[path.stem for path in PROFILE_PATHS])
def profile_path(request: pytest.FixtureRequest) -> Path:
    return request.param


def test_query_gpu_agrees_with_state(profile_path: Path, tmp_path: Path) -> None:
    state = computed_state(profile_path)
    write_state(tmp_path, state)
    fields = (
        "index,name,uuid,serial,pci.bus_id,persistence_mode,pstate,pcie.link.gen.current,"
        "pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.width.current,pcie.link.width.max,"
        "memory.total,driver_version"
    )
    result = run_smi(tmp_path, f"--query-gpu={fields}", "--format=csv,noheader,nounits")
    lost = [gpu for gpu in state["gpus"] if gpu["lost"]]
    assert result.returncode == (15 if lost else 0)
    rows = [line.split(", ") for line in result.stdout.splitlines() if "device handle" not in line]
    expected = [
        [
            str(gpu["index"]),
            gpu["name"],
            gpu["uuid"],
            gpu["serial"],
            "0000" + gpu["bdf"].upper(),
            "Enabled" if gpu["persistence_default"] else "Disabled",
            "P8",
            str(gpu["link"]["gen_idle"]),
            str(gpu["link"]["max_gen"]),
            str(gpu["link"]["max_gen_gpu"]),
            str(gpu["link"]["width"]),
            str(gpu["link"]["max_width"]),
            str(gpu["memory_total_bytes"] // (1024 * 1024)),
            state["driver"]["version"],
        ]
        for gpu in state["gpus"]
        if not gpu["lost"]
    ]
    assert rows == expected


@pytest.mark.parametrize("extra", ["", NOACPI_SUFFIX], ids=["acpi", "noacpi"])
def test_topology_matrix_agrees_with_state(profile_path: Path, tmp_path: Path, extra: str) -> None:
    state = computed_state(profile_path, extra)
    write_state(tmp_path, state)
    result = run_smi(tmp_path, "topo", "-m")
    assert result.returncode == 0
    _labels, cells, affinities = parse_topology_matrix(result.stdout)
    expected = {(pair["a"], pair["b"]): pair["topology"] for pair in state["pairs"]}
    expected.update({(gpu["index"], gpu["index"]): " X " for gpu in state["gpus"]})
    assert cells == expected
    assert affinities == [
        [gpu["cpu_list"], "N/A" if gpu["numa_node"] < 0 else str(gpu["numa_node"]), "", "N/A"]
        for gpu in state["gpus"]
    ]
    if extra:
        assert all(row[1] == "N/A" for row in affinities)


@pytest.mark.parametrize("extra", ["", NOACPI_SUFFIX], ids=["acpi", "noacpi"])
def test_p2p_read_matrix_agrees_with_state(profile_path: Path, tmp_path: Path, extra: str) -> None:
    state = computed_state(profile_path, extra)
    write_state(tmp_path, state)
    result = run_smi(tmp_path, "topo", "-p2p", "r")
    cells = {}
    for line in result.stdout.splitlines():
        row = re.fullmatch(r" GPU(\d+)\t(.*)\t", line)
        if row:
            for column, value in enumerate(row.group(2).split("\t")):
                cells[(int(row.group(1)), column)] = value
    expected = {(pair["a"], pair["b"]): pair["p2p_status"]["read"] for pair in state["pairs"]}
    expected.update({(gpu["index"], gpu["index"]): "X" for gpu in state["gpus"]})
    assert cells == expected
    if extra:
        assert set(cells.values()) <= {"X", "CNS", "U"}


def test_persistenced_with_profile_args(profile_path: Path, tmp_path: Path) -> None:
    from test_persistenced import start_daemon, stop_daemon

    from lingbot_lab import persistence

    profile = profile_module.validate_profile(yaml.safe_load(profile_path.read_text()))
    state = hwstate.compute_state(profile, boot_cmdline(profile))
    write_state(tmp_path, state)
    args = profile["persistenced"]["args"].split()
    assert (
        start_daemon(tmp_path, "--user", "nvidia-persistenced", "--verbose", *args).returncode == 0
    )
    try:
        result = run_smi(tmp_path, "--query-gpu=persistence_mode", "--format=csv,noheader")
        keeps_modes = "--no-persistence-mode" in args
        expected = [
            "Enabled" if gpu["persistence_default"] or not keeps_modes else "Disabled"
            for gpu in state["gpus"]
            if not gpu["lost"]
        ]
        modes = [line for line in result.stdout.splitlines() if "device handle" not in line]
        assert modes == expected
    finally:
        stop_daemon(tmp_path)
    assert not persistence.persistenced_running(tmp_path)
    after = run_smi(tmp_path, "--query-gpu=persistence_mode", "--format=csv,noheader")
    assert [line for line in after.stdout.splitlines() if "device handle" not in line] == [
        "Enabled" if gpu["persistence_default"] else "Disabled"
        for gpu in state["gpus"]
        if not gpu["lost"]
    ]
