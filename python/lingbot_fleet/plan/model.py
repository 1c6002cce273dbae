"""The planner's view of a node: GPUs and directed GPU-to-GPU paths, read from facts + probe.

Stdlib-only: the planner may run on nodes (Ansible module_utils) as well as the controller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PLAN_SCHEMA_VERSION = 1
UNKNOWN_NUMA_NODE = -1


class PlanInputError(ValueError):
    """Facts, probe, findings or policy that the planner cannot use; str() names the fix."""


@dataclass(frozen=True)
class FindingRef:
    """The part of a check finding the planner uses."""

    code: str
    severity: str


@dataclass(frozen=True)
class GpuInput:
    """One GPU as facts (and, when given, the probe) describe it.

    numa_node is UNKNOWN_NUMA_NODE (-1) when sysfs does not know it. Host bandwidths are
    None without a probe (or when the probe could not measure the GPU).
    """

    index: int
    uuid: str | None
    model: str | None
    bus_id: str
    numa_node: int
    numa_node_assumed: bool
    mig_enabled: bool
    lost: bool
    h2d_gbytes_per_s: float | None = None
    d2h_gbytes_per_s: float | None = None
    in_probe: bool = False
    probe_error: str | None = None
    findings: tuple[FindingRef, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class DirectedPath:
    """src -> dst: the facts' topology word and P2P status, plus the probe's measurement."""

    src: int
    dst: int
    path_type: str | None
    p2p_read: str | None
    p2p_write: str | None
    measured: bool = False
    can_access_peer: bool | None = None
    gbytes_per_s: float | None = None
    latency_ns: float | None = None
    data_check: str | None = None
    error: str | None = None

    @property
    def nvlink_count(self) -> int:
        """Links in an NV# topology word, 0 for PCIe paths."""
        word = self.path_type or ""
        count = word[2:]
        # ASCII digits, at most 3 (NV18 is the most links a pair has): "NV²" is no count.
        if word.startswith("NV") and 0 < len(count) <= 3 and count.isascii() and count.isdigit():
            return int(count)
        return 0


@dataclass(frozen=True)
class PlanInputs:
    gpus: tuple[GpuInput, ...]
    paths: dict[tuple[int, int], DirectedPath]
    probe_present: bool
    numa_node_count: int | None
    kernel_cmdline: str
    probe_timestamp: str | None = None

    def gpu(self, index: int) -> GpuInput:
        for gpu in self.gpus:
            if gpu.index == index:
                return gpu
        raise KeyError(index)
