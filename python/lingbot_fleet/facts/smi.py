"""The nvidia-smi fallback: the same GPU fields as NVML, read when pynvml is not importable.

Commands run as argv lists in the C locale: one --query-gpu CSV, `topo -m` and
`topo -p2p r|w|n|a`. The matrices are read with the offline parsers. Drivers older than
the `pcie.link.gen.gpumax` field refuse the whole query (exit 2, `Field ... is not a valid
field to query.`): it is asked again without that field, and the GPU's own maximum
generation then comes from sysfs.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from typing import Any

from .command import run_command
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
# Fields older drivers do not know; a query that names one is refused as a whole.
OPTIONAL_FIELDS = ("pcie.link.gen.gpumax",)
P2P_LETTERS = {"read": "r", "write": "w", "nvlink": "n", "atomics": "a"}
COMMAND_TIMEOUT_S = 30
# nvidia-smi exits 15 when a GPU is lost but still prints the others.
EXIT_GPU_LOST = 15
# nvidia-smi's exit status when it cannot talk to the kernel driver (not loaded).
EXIT_DRIVER_NOT_LOADED = 9
# ... when its NVML library and the kernel module are of different driver versions.
EXIT_VERSION_MISMATCH = 18
EXIT_INVALID_ARGUMENT = 2


class SmiUnavailableError(Exception):
    """nvidia-smi is missing or failed; str() names the command, exit status and output."""

    def __init__(self, message: str, returncode: int | None = None, output: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.output = output

    @property
    def driver_not_loaded(self) -> bool:
        return self.returncode == EXIT_DRIVER_NOT_LOADED

    @property
    def version_mismatch(self) -> bool:
        return self.returncode == EXIT_VERSION_MISMATCH


def run_smi(command: Sequence[str], arguments: Sequence[str]) -> str:
    argv = [*command, *arguments]
    returncode, stdout, stderr = run_command(argv, COMMAND_TIMEOUT_S)
    if returncode is None:
        raise SmiUnavailableError(f"{' '.join(argv)}: {stderr}")
    if returncode not in (0, EXIT_GPU_LOST):
        output = (stdout + stderr).strip()
        raise SmiUnavailableError(
            f"{' '.join(argv)} exited {returncode}: {output[:400]}",
            returncode=returncode,
            output=output,
        )
    return stdout


def _number(text: str) -> int | None:
    return int(text) if text.strip().isdigit() else None


def _enabled(text: str) -> bool | None:
    return {"enabled": True, "disabled": False}.get(text.strip().lower())


def parse_query_rows(
    text: str, fields: Sequence[str] = QUERY_FIELDS
) -> tuple[list[dict[str, Any]], str | None]:
    """GPUs and the driver version from `--query-gpu=<fields> --format=csv,noheader,nounits`.

    Lines that are not full rows (a lost GPU's error message) are skipped; a field left out
    of `fields` (OPTIONAL_FIELDS) reads as unknown.
    """
    gpus: list[dict[str, Any]] = []
    driver_version = None
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(row) != len(fields) or not row[0].strip().isdigit():
            continue
        values = dict.fromkeys(OPTIONAL_FIELDS, "")
        values.update(zip(fields, (cell.strip() for cell in row), strict=True))
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


def _refused_field(error: SmiUnavailableError, fields: Sequence[str]) -> str | None:
    """The optional field an older driver refused the query for, if that is what happened."""
    if error.returncode != EXIT_INVALID_ARGUMENT or "is not a valid field" not in error.output:
        return None
    return next((f for f in OPTIONAL_FIELDS if f in fields and f'"{f}"' in error.output), None)


def query_gpus(command: Sequence[str]) -> tuple[tuple[str, ...], str]:
    """(the fields asked, the CSV): QUERY_FIELDS, less the optional ones the driver refuses."""
    fields: tuple[str, ...] = QUERY_FIELDS
    while True:
        try:
            text = run_smi(
                command, [f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]
            )
        except SmiUnavailableError as error:
            refused = _refused_field(error, fields)
            if refused is None:
                raise
            fields = tuple(field for field in fields if field != refused)
            continue
        return fields, text


def read_smi(command: Sequence[str] = ("nvidia-smi",)) -> dict[str, Any]:
    """Everything the fallback tells: driver version, GPUs, topology matrix, P2P status."""
    from ..parsers.p2p import parse_p2p  # noqa: PLC0415  (only the fallback needs them)
    from ..parsers.topo import parse_topo  # noqa: PLC0415

    fields, query = query_gpus(command)
    gpus, driver_version = parse_query_rows(query, fields)
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
