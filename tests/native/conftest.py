"""Fixtures for the lab's C driver libraries (lab/native): built libraries, lab roots."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from native_support import BUILD_DIR, NATIVE_DIR, write_lab_root

# ---- the built libraries ----------------------------------------------------------


@pytest.fixture(scope="session")
def native_build() -> Path:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.skip("gcc and make are needed to build lab/native")
    result = subprocess.run(
        ["make", "-C", str(NATIVE_DIR)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, f"make -C lab/native failed:\n{result.stdout}{result.stderr}"
    return BUILD_DIR


@pytest.fixture(scope="session")
def nvml_library(native_build: Path) -> ctypes.CDLL:
    """libnvidia-ml.so.1 loaded by path, so pynvml's CDLL('libnvidia-ml.so.1') finds it."""
    return ctypes.CDLL(str(native_build / "libnvidia-ml.so.1"), mode=ctypes.RTLD_GLOBAL)


@pytest.fixture
def lab_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LINGBOT_LAB_ROOT", str(tmp_path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return tmp_path


@pytest.fixture
def nvml_session(nvml_library: ctypes.CDLL, lab_root: Path) -> Iterator[Any]:
    """Returns start(state_text) -> pynvml, initialized on that state; shuts down after."""
    import pynvml

    started: list[bool] = []

    def start(state_text: str) -> Any:
        write_lab_root(lab_root, state_text)
        pynvml.nvmlInit()
        started.append(True)
        return pynvml

    yield start
    for _ in started:
        pynvml.nvmlShutdown()


@pytest.fixture
def cuda_loader(native_build: Path, tmp_path: Path) -> Any:
    """Returns load(state_text) -> a fresh libcuda (own copy, so cuInit reads this state)."""
    counter = [0]

    def load(state_text: str, lab_root: Path) -> ctypes.CDLL:
        write_lab_root(lab_root, state_text)
        counter[0] += 1
        copy_dir = tmp_path / f"libcuda-{counter[0]}"
        copy_dir.mkdir()
        library_path = copy_dir / "libcuda.so.1"
        shutil.copy(native_build / "libcuda.so.1", library_path)
        return ctypes.CDLL(str(library_path))

    return load
