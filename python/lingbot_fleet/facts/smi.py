"""The nvidia-smi fallback: the same GPU fields as NVML, read when pynvml is not importable.

Commands run as argv lists in the C locale: one --query-gpu CSV, `topo -m` and
`topo -p2p r|w|n|a`. The matrices are read with the offline parsers.
"""

from __future__ import annotations

import csv
import os
import subprocess
from collections.abc import Sequence
from typing import Any

from .nvml import bus_id_from_nvml

QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "pcie.link.gen.current",
    "pcie.link.width.current",
    "pcie.link.gen.max",
    "pcie.link.width.max",
    "pcie.link.gen.gpumax",
    "pstate",
    "persistence_mode",
    "mig.mode.current",
    "driver_version",
)
P2P_LETTERS = {"read": "r", "write": "w", "nvlink": "n", "atomics": "a"}
COMMAND_TIMEOUT_S = 30
# nvidia-smi exits 15 when a GPU is lost but still prints the others.
EXIT_GPU_LOST = 15


class SmiUnavailableError(Exception):
    """nvidia-smi is missing or failed; str() names the command, exit status and output."""


def run_smi(command: Sequence[str], arguments: Sequence[str]) -> str:
    argv = [*command, *arguments]
    environment = {**os.environ, "LC_ALL": "C", "LANG": "C"}
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            env=environment,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SmiUnavailableError(f"{' '.join(argv)}: {error}") from None
    if result.returncode not in (0, EXIT_GPU_LOST):
        raise SmiUnavailableError(
            f"{' '.join(argv)} exited {result.returncode}: "
            f"{(result.stdout + result.stderr).strip()[:400]}"
        )
    return result.stdout


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def _enabled(text: str) -> bool | None:
    return {"enabled": True, "disabled": False}.get(text.strip().lower())


def parse_query_rows(text: str) -> tuple[list[dict[str, Any]], str | None]:
    """GPUs and the driver version from `--query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`.

    Lines that are not full rows (a lost GPU's error message) are skipped.
    """
    gpus: list[dict[str, Any]] = []
    driver_version = None
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) != len(QUERY_FIELDS) or not row[0].strip().isdigit():
            continue
        values = dict(zip(QUERY_FIELDS, (cell.strip() for cell in row), strict=True))
        driver_version = values["driver_version"]
        mig = values["mig.mode.current"].lower()
        gpus.append(
            {
                "index": int(values["index"]),
                "lost": False,
                "uuid": values["uuid"],
                "model": values["name"],
                "bus_id": bus_id_from_nvml(values["pci.bus_id"]),
                "pcie": {
                    "current_gen": _number(values["pcie.link.gen.current"]),
                    "current_width": _number(values["pcie.link.width.current"]),
                    "max_gen": _number(values["pcie.link.gen.max"]),
                    "max_width": _number(values["pcie.link.width.max"]),
                    "max_gen_gpu": _number(values["pcie.link.gen.gpumax"]),
                },
                "performance_state": values["pstate"] or None,
                "persistence_mode": _enabled(values["persistence_mode"]),
                "mig_mode": mig if mig in ("enabled", "disabled") else None,
            }
        )
    return gpus, driver_version


def _matrix_by_index(gpu_count: int, cells: dict[str, dict[str, str]]) -> list[list[str | None]]:
    return [
        [cells.get(f"GPU{a}", {}).get(f"GPU{b}") for b in range(gpu_count)]
        for a in range(gpu_count)
    ]


def read_smi(command: Sequence[str] = ("nvidia-smi",)) -> dict[str, Any]:
    """Everything the fallback tells: driver version, GPUs, topology matrix, P2P status."""
    from ..parsers.p2p import parse_p2p  # noqa: PLC0415  (only the fallback needs them)
    from ..parsers.topo import parse_topo  # noqa: PLC0415

    query = run_smi(
        command, [f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    gpus, driver_version = parse_query_rows(query)
    count = max((gpu["index"] for gpu in gpus), default=-1) + 1
    topology: list[list[str | None]] = []
    p2p: dict[str, list[list[str | None]]] = {}
    if count > 1:
        topology = _matrix_by_index(count, parse_topo(run_smi(command, ["topo", "-m"]))["links"])
        for name, letter in P2P_LETTERS.items():
            parsed = parse_p2p(run_smi(command, ["topo", "-p2p", letter]))
            p2p[name] = _matrix_by_index(count, parsed["status"])
    elif count == 1:
        topology = [["X"]]
        p2p = {name: [["X"]] for name in P2P_LETTERS}
    return {"driver_version": driver_version, "gpus": gpus, "topology": topology, "p2p": p2p}
