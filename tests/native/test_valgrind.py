"""The main calls of both libraries, from C, under valgrind: no memory errors, no leaks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from native_support import flatten, scenario_state, write_lab_root

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


def test_main_calls_are_clean_under_valgrind(smoke_program: Path, lab_root: Path) -> None:
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    write_lab_root(lab_root, flatten(scenario_state("phb")))
    result = subprocess.run(
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
    assert result.returncode == 0, result.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in result.stderr
