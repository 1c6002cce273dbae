"""nvidia-smi (lab simulation) and libnvidia-ml agree on every value both show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from native_support import LAB_NODE_DIR, REPO_ROOT, RUN_SUBDIR, SCENARIOS, flatten, scenario_state

pytestmark = pytest.mark.native

NVIDIA_SMI = REPO_ROOT / "lab" / "node" / "bin" / "nvidia-smi"
FIELDS = (
    "index,name,uuid,serial,pci.bus_id,pci.device_id,pci.sub_device_id,persistence_mode,pstate,"
    "pcie.link.gen.current,pcie.link.gen.max,pcie.link.gen.gpumax,pcie.link.width.current,"
    "pcie.link.width.max,memory.total,memory.used,memory.free"
)
MIB = 1024 * 1024


def smi_rows(lab_root: Path) -> list[list[str]]:
    result = subprocess.run(
        [sys.executable, str(NVIDIA_SMI), f"--query-gpu={FIELDS}", "--format=csv,noheader,nounits"],
        env={**os.environ, "LINGBOT_LAB_ROOT": str(lab_root), "LINGBOT_LAB_LIB": str(LAB_NODE_DIR)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [line.split(", ") for line in result.stdout.splitlines()]


def nvml_row(nvml: Any, index: int) -> list[str]:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    pci = nvml.nvmlDeviceGetPciInfo(handle)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    return [
        str(nvml.nvmlDeviceGetIndex(handle)),
        nvml.nvmlDeviceGetName(handle),
        nvml.nvmlDeviceGetUUID(handle),
        nvml.nvmlDeviceGetSerial(handle),
        pci.busId,
        f"0x{pci.pciDeviceId:08X}",
        f"0x{pci.pciSubSystemId:08X}",
        "Enabled" if nvml.nvmlDeviceGetPersistenceMode(handle) else "Disabled",
        f"P{nvml.nvmlDeviceGetPerformanceState(handle)}",
        str(nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
        str(nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
        str(nvml.nvmlDeviceGetGpuMaxPcieLinkGeneration(handle)),
        str(nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
        str(nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        str(memory.total // MIB),
        str(memory.used // MIB),
        str(memory.free // MIB),
    ]


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "lost"])
def test_query_gpu_agrees_with_nvml(nvml_session: Any, lab_root: Path, scenario: str) -> None:
    if not NVIDIA_SMI.exists():
        pytest.skip("lab/node/bin/nvidia-smi is not written yet")
    state = scenario_state(scenario)
    nvml = nvml_session(flatten(state))
    (lab_root / RUN_SUBDIR / "state.json").write_text(json.dumps(state))
    rows = smi_rows(lab_root)
    assert rows == [nvml_row(nvml, gpu["index"]) for gpu in state["gpus"]]


@pytest.mark.parametrize(("load_s", "gen"), [(0.1, 1), (0.5, 4)])
def test_link_ramp_agrees_with_nvml(
    nvml_session: Any, lab_root: Path, load_s: float, gen: int
) -> None:
    """Under load both show P0; the link is at its load generation only once the copies
    have lasted the ramp time (250 ms unless the state says otherwise)."""
    state = scenario_state("phb")
    nvml = nvml_session(flatten(state))
    (lab_root / RUN_SUBDIR / "state.json").write_text(json.dumps(state))
    now_s = time.time()
    busy = lab_root / RUN_SUBDIR / "busy"
    busy.mkdir(exist_ok=True)
    (busy / "0").write_text(f"{now_s + 30} {now_s - load_s} {now_s}\n")
    rows = smi_rows(lab_root)
    assert rows[0] == nvml_row(nvml, 0)
    assert (rows[0][8], rows[0][9]) == ("P0", str(gen))
