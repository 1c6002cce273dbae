"""Lab nodes for probe tests, each with its own copy of the lab's libcuda.

The lab's libcuda reads the node state once per process, so every test loads a private
copy of the library (a different file is a separate library with its own state).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts_support import SMI_COMMAND, LabNode, boot_lab_node, cuda_library

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.facts.load import nvml_sampler
from lingbot_fleet.gpu.probe import ProbeParameters, run_probe

TOLERANCE = 0.03


@dataclass(frozen=True)
class ProbedNode:
    node: LabNode
    facts: dict[str, Any]
    cuda_library: str


def prepare_node(profile: dict[str, Any], tmp_path: Path, lab_env: Any) -> ProbedNode:
    node = boot_lab_node(profile, tmp_path)
    lab_env(node)
    private = tmp_path / "driver" / "libcuda.so.1"
    private.parent.mkdir()
    shutil.copy(cuda_library(), private)
    facts = gather_facts(node.root, use_nvml=False, smi_command=SMI_COMMAND)
    return ProbedNode(node, facts, str(private))


def probe(
    probed: ProbedNode,
    pynvml: Any = None,
    skip: dict[str, str] | None = None,
    **parameters: Any,
) -> dict[str, Any]:
    """Run the probe on the node, reading the link through the lab's NVML when given."""
    sampler = None
    if pynvml is not None:
        pynvml.nvmlInit()
        sampler = nvml_sampler(pynvml)
    try:
        return run_probe(
            probed.facts,
            ProbeParameters(**parameters),
            cuda_library=probed.cuda_library,
            sampler=sampler,
            skip=skip,
        )
    finally:
        if pynvml is not None:
            pynvml.nvmlShutdown()


def state_pair(node: LabNode, src: int, dst: int) -> dict[str, Any]:
    return next(p for p in node.state["pairs"] if (p["a"], p["b"]) == (src, dst))


def assert_close(measured: float | None, expected: float) -> None:
    assert measured is not None
    assert abs(measured - expected) <= TOLERANCE * expected, (measured, expected)


def assert_path_matches(figures: dict[str, Any], path: dict[str, Any]) -> None:
    """Measured figures within 3 % of the lab state's path figures."""
    assert_close(figures["unidirectional_gbytes_per_s"], path["gbytes_per_s"])
    assert_close(figures["bidirectional_gbytes_per_s"], path["bidir_gbytes_per_s"])
    assert_close(figures["latency_ns"], path["latency_ns"])
