"""Lab nodes for monitor tests: boots of one profile, plans, monitor configurations.

Each boot gets its own directory and its own copy of the lab's libcuda (the library reads
the node state once per process), so one test can reboot a node with another kernel
command line and run the monitor again with the same state directory.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from facts_support import SMI_COMMAND, LabNode, boot_lab_node, cuda_library

from lingbot_fleet.facts import gather_facts
from lingbot_fleet.gpu.probe import ProbeParameters, run_probe
from lingbot_fleet.monitor.config import MonitorConfig

SMALL_PROBE = {"size_mib": 4, "repetitions": 2, "latency_repetitions": 5}


@dataclass(frozen=True)
class Boot:
    node: LabNode
    cuda_library: str

    def facts(self) -> dict[str, Any]:
        return gather_facts(self.node.root, use_nvml=False, smi_command=SMI_COMMAND)

    def probe(self) -> dict[str, Any]:
        return run_probe(
            self.facts(),
            ProbeParameters(size_bytes=4 << 20, repetitions=2, latency_repetitions=5),
            cuda_library=self.cuda_library,
        )


def boot(
    profile: dict[str, Any], directory: Path, lab_env: Any, cmdline: str | None = None
) -> Boot:
    """Boot `profile` in `directory` (new) and point the lab's tools at it."""
    node = boot_lab_node(profile, directory, cmdline)
    lab_env(node)
    private = directory / "driver" / "libcuda.so.1"
    private.parent.mkdir()
    shutil.copy(cuda_library(), private)
    return Boot(node, str(private))


def monitor_config(booted: Boot, work: Path, **changes: Any) -> MonitorConfig:
    """A configuration reading `booted`, with plan, state and metrics under `work`."""
    values: dict[str, Any] = {
        "plan_path": str(work / "plan.json"),
        "state_dir": str(work / "state"),
        "textfile_dir": str(work / "textfile"),
        "root": str(booted.node.root),
        "use_nvml": False,
        "nvidia_smi": list(SMI_COMMAND),
        "cuda_library": booted.cuda_library,
        **SMALL_PROBE,
        **changes,
    }
    return MonitorConfig.from_mapping(values)


def write_plan(work: Path, plan: dict[str, Any]) -> Path:
    path = work / "plan.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(plan))
    return path


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a textfile, parsed with prometheus_client: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def pair_labels(src: int, dst: int) -> tuple[tuple[str, str], ...]:
    return (("dst", str(dst)), ("src", str(src)))
