"""The main calls of both libraries, from C, under valgrind: no memory errors, no leaks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from native_support import (
    ACS_PASSTHROUGH_CMDLINE,
    ACS_PROFILE,
    ACS_REDIRECT_BITS,
    boot_profile,
    flatten,
    scenario_state,
    write_acs_control,
    write_lab_root,
)

pytestmark = pytest.mark.native

SMOKE_SOURCE = Path(__file__).with_name("smoke_main.c")


@pytest.fixture
def smoke_program(native_build: Path, tmp_path: Path) -> Path:
    program = tmp_path / "smoke"
    result = subprocess.run(
        [
            "gcc",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-g",
            "-o",
            str(program),
            str(SMOKE_SOURCE),
            f"-L{native_build}",
            "-l:libnvidia-ml.so.1",
            "-l:libcuda.so.1",
            f"-Wl,-rpath,{native_build}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, f"compiling {SMOKE_SOURCE.name} failed:\n{result.stderr}"
    return program


def test_smoke_program_runs(smoke_program: Path, lab_root: Path) -> None:
    write_lab_root(lab_root, flatten(scenario_state("phb")))
    result = subprocess.run([str(smoke_program)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert "nvml: 2 GPUs, NVIDIA RTX A6000 at 00000000:41:00.0, gen 1, p2p 0" in result.stdout
    assert "cuda: 2 devices, 1 MiB peer copy 0.03" in result.stdout


def run_under_valgrind(smoke_program: Path) -> subprocess.CompletedProcess[str]:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    return subprocess.run(
        [
            "valgrind",
            "--error-exitcode=1",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite,indirect",
            str(smoke_program),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_main_calls_are_clean_under_valgrind(smoke_program: Path, lab_root: Path) -> None:
    write_lab_root(lab_root, flatten(scenario_state("phb")))
    result = run_under_valgrind(smoke_program)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in result.stderr


@pytest.mark.parametrize(
    ("redirect_bits", "peer_copy_ms"),
    [(ACS_REDIRECT_BITS, "0.06"), (0x0000, "0.039")],
    ids=["redirecting", "cleared"],
)
def test_peer_copies_reading_the_acs_ports_are_clean_under_valgrind(
    smoke_program: Path, lab_root: Path, redirect_bits: int, peer_copy_ms: str
) -> None:
    state, text = boot_profile(lab_root, ACS_PROFILE, ACS_PASSTHROUGH_CMDLINE)
    write_lab_root(lab_root, text)
    for port in state["pairs"][0]["acs_redirect_ports"]:
        config = lab_root / port["config_path"].lstrip("/")
        write_acs_control(config, redirect_bits, ACS_REDIRECT_BITS)
    result = run_under_valgrind(smoke_program)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in result.stderr
    # 1 MiB: 17.5 GB/s redirected through the root complex, 27.4 GB/s in the switch.
    assert f"cuda: 2 devices, 1 MiB peer copy {peer_copy_ms}" in result.stdout
