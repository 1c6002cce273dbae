"""A finding about one GPU, named by its index, bus id and UUID. Stdlib only."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..node.findings import Finding


def gpu_words(gpu: Mapping[str, Any]) -> str:
    """'GPU 0 (0000:41:00.0, GPU-...)'."""
    return f"GPU {gpu.get('index')} ({gpu.get('bus_id')}, {gpu.get('uuid')})"


def gpu_evidence(gpu: Mapping[str, Any], **values: Any) -> dict[str, Any]:
    """The GPU's index, bus id and UUID, then ``values``."""
    return {
        "index": gpu.get("index"),
        "bus_id": gpu.get("bus_id"),
        "uuid": gpu.get("uuid"),
        **values,
    }


def gpu_finding(
    gpu: Mapping[str, Any],
    code: str,
    severity: str,
    message: str,
    fix: str,
    evidence: Mapping[str, Any],
) -> Finding:
    """A finding whose subject is the GPU's bus id and whose message starts by naming it."""
    return Finding(
        code, severity, str(gpu.get("bus_id")), f"{gpu_words(gpu)}: {message}", evidence, fix
    )
