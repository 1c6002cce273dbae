"""GPU memory health: uncorrectable ECC errors, row remapping (NVML, Ampere and later) and
page retirement (before Ampere).

A row remap replaces a failing memory row with a spare one: pending until the GPU is next
reset (the faulty row is still mapped until then), failed when no spare row was left (the
GPU cannot be trusted with memory again and goes back to the vendor). Before Ampere the
driver retires whole pages instead: a retirement is pending until the GPU is next reset,
and a GPU with RETIRED_PAGES_LIMIT pages retired is due for replacement (NVIDIA's
guidance: the GPU can retire only a few more). Uncorrectable ECC
errors since the driver loaded mean data on the GPU may have been corrupted. The facts
give each GPU's ``memory`` as NVML reports it; a value NVML does not give is unknown and
raises nothing here (gpu_checks says the driver answers; a GPU without ECC has nothing to
count). Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..node.findings import Finding

# Retired pages (both causes together) at which NVIDIA advises replacing the GPU.
RETIRED_PAGES_LIMIT = 60


def _gpu_words(gpu: Mapping[str, Any]) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('uuid')})"


def memory_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    """ROW_REMAP_FAILED and RETIRED_PAGES_LIMIT (critical: the planner leaves the GPU
    out), ROW_REMAP_PENDING and RETIRED_PAGES_PENDING (warning) and ECC_UNCORRECTED_ERRORS
    (error) for one GPU."""
    memory = gpu.get("memory")
    if not isinstance(memory, Mapping):
        return []
    index = gpu.get("index")
    read_rows = memory.get("remapped_rows")
    rows: Mapping[str, Any] = read_rows if isinstance(read_rows, Mapping) else {}
    read_pages = memory.get("retired_pages")
    pages: Mapping[str, Any] = read_pages if isinstance(read_pages, Mapping) else {}
    evidence = {
        "index": index,
        "uuid": gpu.get("uuid"),
        "remapped_rows": dict(rows) if rows else None,
        "retired_pages": dict(pages) if pages else None,
        "uncorrected_volatile": memory.get("uncorrected_volatile"),
        "uncorrected_aggregate": memory.get("uncorrected_aggregate"),
    }
    subject = gpu["bus_id"]

    def finding(code: str, severity: str, message: str, fix: str) -> Finding:
        return Finding(code, severity, subject, f"{_gpu_words(gpu)}: {message}", evidence, fix)

    findings = []
    if rows.get("failed"):
        findings.append(
            finding(
                "ROW_REMAP_FAILED",
                "critical",
                "a memory row remap failed (no spare row was left): its memory cannot be "
                "trusted, and it is left out of the plan",
                f"take GPU {index} out of service and return it to the vendor with "
                f"nvidia-smi -q -d ROW_REMAPPER -i {index} as evidence",
            )
        )
    elif rows.get("pending"):
        findings.append(
            finding(
                "ROW_REMAP_PENDING",
                "warning",
                "a memory row remap is pending; the failing row stays in use until the GPU "
                "is reset",
                f"reset the GPU while nothing uses it (nvidia-smi -r -i {index}), or reboot "
                "the node in its next window",
            )
        )
    retired = sum(
        count
        for count in (pages.get("single_bit"), pages.get("double_bit"))
        if isinstance(count, int) and not isinstance(count, bool)
    )
    if retired >= RETIRED_PAGES_LIMIT:
        findings.append(
            finding(
                "RETIRED_PAGES_LIMIT",
                "critical",
                f"{retired} memory pages retired (NVIDIA advises replacing a GPU at "
                f"{RETIRED_PAGES_LIMIT}): it is left out of the plan",
                f"take GPU {index} out of service and return it to the vendor with "
                f"nvidia-smi -q -d PAGE_RETIREMENT -i {index} as evidence",
            )
        )
    if pages.get("pending") is True:
        findings.append(
            finding(
                "RETIRED_PAGES_PENDING",
                "warning",
                "a memory page retirement is pending; the failing page stays in use until "
                "the GPU is reset",
                f"reset the GPU while nothing uses it (nvidia-smi -r -i {index}), or reboot "
                "the node in its next window",
            )
        )
    volatile = memory.get("uncorrected_volatile")
    if isinstance(volatile, int) and not isinstance(volatile, bool) and volatile > 0:
        findings.append(
            finding(
                "ECC_UNCORRECTED_ERRORS",
                "error",
                f"{volatile} uncorrectable ECC error(s) since the driver loaded: data on the "
                "GPU may have been corrupted",
                f"drain the work on GPU {index}, reset it (nvidia-smi -r -i {index}) and "
                "watch the count; errors that come back mean the GPU goes to the vendor",
            )
        )
    return findings
