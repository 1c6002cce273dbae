"""lab/node/bin/nvidia-smi run as a process against a temporary LINGBOT_LAB_ROOT."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from lab_smi_support import LAB_NODE_DIR, write_state

NVIDIA_SMI = LAB_NODE_DIR / "bin" / "nvidia-smi"


def run_smi(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    environment = {
        **os.environ,
        "LINGBOT_LAB_ROOT": str(root),
        "LINGBOT_LAB_LIB": str(LAB_NODE_DIR),
    }
    return subprocess.run(
        [str(NVIDIA_SMI), *argv],
        env=environment,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_list_gpus(lab_root: Path) -> None:
    result = run_smi(lab_root, "-L")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.splitlines()[3] == (
        "GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-5f0c2a4e-1b3d-4e8f-9a7b-0c1d2e3f0004)"
    )


def test_default_table(lab_root: Path) -> None:
    result = run_smi(lab_root)
    assert result.returncode == 0
    assert "| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15" in result.stdout
    assert result.stdout.count("NVIDIA H100 80GB HBM3") == 4


def test_query_gpu_follows_live_files(lab_root: Path) -> None:
    fields = "--query-gpu=index,persistence_mode,pstate,pcie.link.gen.current"
    busy = lab_root / "run/lingbot-lab/busy"
    busy.mkdir(parents=True)
    (busy / "1").write_text("99999999999.0\n")
    result = run_smi(lab_root, fields, "--format=csv,noheader", "-i", "0,1,2")
    assert (result.returncode, result.stdout) == (
        0,
        "0, Disabled, P8, 1\n1, Disabled, P0, 5\n2, Enabled, P8, 1\n",
    )


def test_unknown_field_exits_2(lab_root: Path) -> None:
    result = run_smi(lab_root, "--query-gpu=index,numa", "--format=csv")
    assert (result.returncode, result.stdout) == (
        2,
        'Field "numa" is not a valid field to query.\n\n',
    )


def test_persistence_mode_writes_the_live_file(lab_root: Path) -> None:
    result = run_smi(lab_root, "-pm", "1", "-i", "00000000:C2:00.0")
    if os.geteuid() != 0:
        assert result.returncode == 4
        return
    assert (result.returncode, result.stdout) == (
        0,
        "Enabled Legacy persistence mode for GPU 00000000:C2:00.0.\nAll done.\n",
    )
    assert (lab_root / "run/lingbot-lab/persistence/3").read_text() == "1\n"
    query = run_smi(lab_root, "--query-gpu=persistence_mode", "--format=csv,noheader", "-i", "3")
    assert query.stdout == "Enabled\n"


def test_lost_gpu_exit_code(tmp_path: Path, lost_state: dict[str, Any]) -> None:
    write_state(tmp_path, lost_state)
    result = run_smi(tmp_path, "--query-gpu=index,uuid", "--format=csv,noheader")
    assert result.returncode == 15
    assert result.stdout.splitlines()[1] == (
        "Unable to determine the device handle for GPU0000:42:00.0: Unknown Error"
    )
    assert run_smi(tmp_path, "topo", "-m").returncode == 0


def test_topology_commands(lab_root: Path) -> None:
    matrix = run_smi(lab_root, "topo", "-m")
    assert matrix.returncode == 0
    assert "GPU2\tSYS\tSYS\t X \tNV4\t16-31\t1\t\tN/A\n" in matrix.stdout
    p2p = run_smi(lab_root, "topo", "-p2p", "p")
    assert " GPU0\tX\tOK\tTNS\tTNS\t\n" in p2p.stdout


def test_driver_not_loaded_without_state(tmp_path: Path) -> None:
    result = run_smi(tmp_path, "-L")
    assert result.returncode == 9
    assert result.stdout.startswith("NVIDIA-SMI has failed because it couldn't communicate")
