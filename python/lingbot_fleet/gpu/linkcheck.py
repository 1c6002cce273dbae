"""PCIe link and NUMA checks: facts (+ an optional under-load sample) and policy -> findings.

Pure functions, stdlib only (they run in a role module on the node and on the controller).

Rules:
- The path: the GPU's own link and every bridge link up to the root port (path_links).
  Width is judged at rest, per link: narrower than the expected width (per GPU model,
  default the GPU's own maximum) because an end can do no more is
  PCIE_WIDTH_BELOW_EXPECTED (the slot, or the device, limits it); trained below what
  both ends can do is PCIE_LINK_TRAINED_BELOW_CAPABILITY (a bad seat, riser or cable).
- Host bandwidth: the probe's H2D/D2H copy-engine figures against the floor of what the
  path can do (host_copy_floor_gbytes_per_s of its narrowest-capable link).
- Generation: a GPU idling at a low generation is never a finding. A slot that cannot
  negotiate the expected generation is (`basis: negotiable_max`; for bridge links too,
  whose generation at rest is never judged). Under load, a GPU link below the expected
  generation is trained below capability (`basis: under_load`), judged on a reading taken
  by DCGM's rule (facts.load.LinkReading): after at least `min_load_s` of sustained
  copies, with the GPU in P0 before and after the reading. A reading that misses the rule
  (too short a load, a low-power state at either end, a failed read) leaves the
  generation indeterminate (info), not failed. A probe's readings are used when they
  were taken that way, and by gpu_checks only while the probe is fresh.
- Chipset-attached: see `chipset_evidence`.
- NUMA: numa_node -1 on a machine with more than one NUMA node.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from ..facts.schema import schema_problems
from ..node.findings import (
    Finding,
    at_or_above,
    count_by_severity,
    override_severities,
    severity_label,
)
from .driver_versions import driver_version_findings
from .memory_health import memory_findings
from .nvlink import fabric_findings, nvlink_error_findings, nvlink_findings
from .recovery_action import recovery_action_findings
from .throttle import clock_event_findings
from .xid import xid_findings

# CUDA errors after which a GPU's context is dead (probe.STICKY_ERRORS).
STICKY_CUDA_ERRORS = (
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_DEVICE_UNAVAILABLE",
)
# Vendor and device ids of bridges inside desktop chipsets (AMD Promontory and X570,
# Intel 600/700-series PCH root ports); policy can add more ("vvvv:dddd").
KNOWN_CHIPSET_BRIDGE_RANGES: tuple[tuple[int, int, int], ...] = (
    (0x1022, 0x43B0, 0x43FF),
    (0x1022, 0x57A3, 0x57A4),
    (0x8086, 0x7A30, 0x7A4F),
)
# A link above the GPU's own slot narrower than this is a chipset uplink, not a CPU port.
UPLINK_MIN_WIDTH = 8
# The performance state a reading must see before and after it (DCGM's rule).
LOAD_PSTATE = "P0"
# Sustained copies a link needs before its reading counts (real links idle at Gen1 and take
# a while to retrain).
MIN_LOAD_S = 0.5
PROBE_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


@dataclass(frozen=True)
class LinkExpectation:
    gen: int | None = None  # None: the GPU's own maximum generation
    width: int | None = None  # None: the GPU's own maximum width


@dataclass(frozen=True)
class LinkPolicy:
    expected_by_model: Mapping[str, LinkExpectation] = field(default_factory=dict)
    default: LinkExpectation = field(default_factory=LinkExpectation)
    chipset_bridge_ids: Sequence[str] = ()
    numa_node_count: int = 0  # 0: take it from the facts
    min_load_s: float = MIN_LOAD_S  # sustained load before a link reading counts
    # NVLinks per GPU model, over nvlink.NVLINKS_BY_MODEL (gpu_checks_nvlinks_by_model).
    nvlinks_by_model: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def from_vars(cls, data: Mapping[str, Any]) -> LinkPolicy:
        """From the gpu_checks role variables, without the role prefix."""

        def expectation(raw: Mapping[str, Any] | None) -> LinkExpectation:
            raw = raw or {}
            return LinkExpectation(gen=raw.get("gen"), width=raw.get("width"))

        return cls(
            expected_by_model={
                model: expectation(value)
                for model, value in (data.get("expected_links") or {}).items()
            },
            default=expectation(data.get("expected_link_default")),
            chipset_bridge_ids=tuple(data.get("chipset_bridge_ids") or ()),
            numa_node_count=int(data.get("numa_node_count") or 0),
            min_load_s=float(data.get("load_min_s") or MIN_LOAD_S),
            nvlinks_by_model=_nvlinks_by_model(data.get("nvlinks_by_model")),
        )

    def expected(self, gpu: Mapping[str, Any]) -> tuple[int | None, int | None]:
        """(generation, width) expected of this GPU."""
        pcie = gpu["pcie"]
        chosen = self.expected_by_model.get(gpu.get("model") or "", self.default)
        gen = chosen.gen if chosen.gen is not None else pcie.get("max_gen_gpu")
        width = chosen.width if chosen.width is not None else pcie.get("max_width_gpu")
        return gen, width


def _nvlinks_by_model(raw: Mapping[str, Any] | None) -> dict[str, int]:
    """gpu_checks_nvlinks_by_model as {model: links}; a count that is not a whole number
    from 1 to 18 is refused naming the model (it decides which GPUs are found degraded)."""
    table = {}
    for model, count in (raw or {}).items():
        text = str(count).strip()
        if isinstance(count, bool) or not text.isascii() or not text.isdigit():
            number = 0
        else:
            number = int(text)
        if not 1 <= number <= 18:
            raise ValueError(
                f"gpu_checks_nvlinks_by_model[{model!r}] is {count!r}, not a whole number of "
                "NVLinks from 1 to 18; write the links that GPU model has"
            )
        table[str(model)] = number
    return table


def _parse_id(text: str | None) -> int | None:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def known_chipset_bridge(bridge: Mapping[str, Any], extra_ids: Iterable[str] = ()) -> bool:
    vendor = _parse_id(bridge.get("vendor_id"))
    device = _parse_id(bridge.get("device_id"))
    if vendor is None or device is None:
        return False
    if any(vendor == v and low <= device <= high for v, low, high in KNOWN_CHIPSET_BRIDGE_RANGES):
        return True
    wanted = f"{vendor:04x}:{device:04x}"
    return any(wanted == item.lower().removeprefix("0x") for item in extra_ids)


def chipset_evidence(gpu: Mapping[str, Any], extra_ids: Iterable[str] = ()) -> list[str]:
    """Why the GPU's path runs through a chipset (empty: it hangs off CPU root ports).

    bridges run from the GPU's slot port (first) up to the root port (last). A path is
    chipset-attached when
    1. a bridge has a known chipset vendor:device id; or
    2. a bridge reporting itself as a root port sits below another PCI bridge (CPU root
       ports hang off a host bridge; a "root port" further down belongs to a chipset); or
    3. a link above the GPU's own slot is narrower than x8 while the GPU is x8 or wider
       (the chipset's shared uplink, e.g. x4 behind a x16 GPU).
    """
    bridges = list(gpu.get("bridges") or [])
    reasons: list[str] = []
    for position, bridge in enumerate(bridges):
        name = f"bridge {bridge['bdf']} ({bridge.get('vendor_id')}:{bridge.get('device_id')})"
        if known_chipset_bridge(bridge, extra_ids):
            reasons.append(f"{name} is a known chipset bridge")
        if bridge.get("port_type") == "root_port" and position < len(bridges) - 1:
            reasons.append(f"{name} is a root port below another PCI bridge")
        width = (bridge.get("link") or {}).get("max_width")
        gpu_width = gpu["pcie"].get("max_width_gpu") or 0
        if (
            position > 0
            and width is not None
            and width < UPLINK_MIN_WIDTH
            and width < gpu_width
            and gpu_width >= UPLINK_MIN_WIDTH
        ):
            reasons.append(f"{name} feeds the GPU's x{gpu_width} slot through an x{width} link")
    return reasons


def reading_problem(reading: Mapping[str, Any], min_load_s: float) -> str | None:
    """Why a link reading under load does not count (None: it does)."""
    load_s = reading.get("load_s")
    if reading.get("error"):
        return f"the reading failed: {reading['error']}"
    if reading.get("gen") is None:
        return "the reading has no link generation"
    if load_s is None:
        return "the reading does not say how long the load had lasted"
    if load_s < min_load_s:
        return (
            f"the copies had run {load_s:g} s when it was read, less than the "
            f"{min_load_s:g} s a link needs to train up"
        )
    ends = (
        reading.get("pstate_before"),
        reading.get("performance_state"),
        reading.get("pstate_after"),
    )
    if any(pstate != LOAD_PSTATE for pstate in ends):
        before, during, after = (pstate or "unknown" for pstate in ends)
        return (
            f"the GPU was not in {LOAD_PSTATE} throughout the reading (before {before}, "
            f"during {during}, after {after})"
        )
    return None


def load_summary(sample: Mapping[str, Any] | None, min_load_s: float) -> dict[str, Any] | None:
    """From one GPU's load sample: its reading, and whether the reading counts."""
    if not sample or not sample.get("possible"):
        return None
    reading = dict(sample.get("reading") or {})
    problem = reading_problem(reading, min_load_s)
    return {
        "reading": reading,
        "counts": problem is None,
        "problem": problem,
        "min_load_s": min_load_s,
        "gen_under_load": reading.get("gen") if problem is None else None,
        "source": sample.get("source", "load sample"),
    }


# Raw PCIe bandwidth per lane and direction in GB/s, after the line code: 8b/10b up to
# Gen2, 128b/130b for Gen3 to Gen5, FLIT 242/256 for Gen6.
LANE_GBYTES_PER_S = {
    1: 2.5 * 8 / 10 / 8,
    2: 5.0 * 8 / 10 / 8,
    3: 8.0 * 128 / 130 / 8,
    4: 16.0 * 128 / 130 / 8,
    5: 32.0 * 128 / 130 / 8,
    6: 64.0 * 242 / 256 / 8,
}
# Share of the raw rate a healthy link gives nvbandwidth-style copy-engine host copies
# (TLP headers, flow control, DMA turnaround): Gen4 x16 measures about 25 GB/s of 31.5,
# Gen5 x16 about 55 of 63; public health checks fail Gen5 x16 below about 48 GB/s.
HOST_COPY_EFFICIENCY = 0.75
# Smaller host copies are not judged against the floor: their fixed latency (about 10 us)
# weighs on the figure (a 4 MiB copy reads 5 % low on a healthy Gen4 x16 link).
HOST_COPY_MIN_BYTES = 32 << 20
# The ports a link reaches from below: a switch upstream port's link goes up to the port
# above it; root ports and switch downstream ports link down (to a GPU or a switch).
UPSTREAM_FACING_PORT_TYPES = ("switch_upstream",)


def raw_link_gbytes_per_s(gen: int, width: int) -> float:
    """What a PCIe link carries per direction before protocol overhead (GB/s)."""
    return LANE_GBYTES_PER_S[gen] * width


def host_copy_floor_gbytes_per_s(gen: int, width: int) -> float:
    """The lowest H2D/D2H copy-engine figure a healthy Gen<gen> x<width> path gives."""
    return round(raw_link_gbytes_per_s(gen, width) * HOST_COPY_EFFICIENCY, 1)


def _smallest(*values: int | None) -> int | None:
    known = [value for value in values if value is not None]
    return min(known) if known else None


@dataclass(frozen=True)
class PathLink:
    """One PCIe link on a GPU's path to its root port.

    `device` is the end below (the GPU, or a switch's upstream port), `port` the end above
    (the slot: a root port or a switch downstream port). The link can do the smaller of
    the two ends' maxima (`max_gen`, `max_width`); `current_*` is what it trained at.
    """

    device: str
    device_kind: str  # "gpu" or the bridge's port type
    port: str | None
    port_kind: str | None
    current_gen: int | None
    current_width: int | None
    device_max_gen: int | None
    device_max_width: int | None
    port_max_gen: int | None
    port_max_width: int | None
    max_gen: int | None
    max_width: int | None

    @property
    def name(self) -> str:
        above = f" - {self.port_kind or 'port'} {self.port}" if self.port else ""
        below = "GPU" if self.device_kind == "gpu" else (self.device_kind or "bridge")
        return f"the link {below} {self.device}{above}".replace("_", " ")

    def to_evidence(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "device_kind": self.device_kind,
            "port": self.port,
            "port_kind": self.port_kind,
            "current_gen": self.current_gen,
            "current_width": self.current_width,
            "device_max_gen": self.device_max_gen,
            "device_max_width": self.device_max_width,
            "port_max_gen": self.port_max_gen,
            "port_max_width": self.port_max_width,
            "max_gen": self.max_gen,
            "max_width": self.max_width,
        }


def _faces_up(bridges: Sequence[Mapping[str, Any]], position: int) -> bool:
    """Whether the bridge's link goes up to the next bridge. Without a port type (config
    space unreadable as non-root) the path's shape decides: from the root port (last,
    linking down) bridges alternate between linking up and linking down."""
    port_type = bridges[position].get("port_type")
    if port_type is not None:
        return port_type in UPSTREAM_FACING_PORT_TYPES
    return (len(bridges) - 1 - position) % 2 == 1


def path_links(gpu: Mapping[str, Any]) -> list[PathLink]:
    """The GPU's own link, then every bridge link up to the root port (nearest first)."""
    pcie = gpu["pcie"]
    bridges = list(gpu.get("bridges") or [])
    slot = bridges[0] if bridges else None
    slot_link = (slot or {}).get("link") or {}
    links = [
        PathLink(
            device=gpu["bus_id"],
            device_kind="gpu",
            port=slot["bdf"] if slot else None,
            port_kind=slot.get("port_type") if slot else None,
            current_gen=pcie.get("current_gen"),
            current_width=pcie.get("current_width"),
            device_max_gen=pcie.get("max_gen_gpu"),
            device_max_width=pcie.get("max_width_gpu"),
            port_max_gen=slot_link.get("max_gen"),
            port_max_width=slot_link.get("max_width"),
            # NVML's negotiable maximum is this link's; the slot's LnkCap where it has none.
            max_gen=_smallest(pcie.get("max_gen"))
            or _smallest(pcie.get("max_gen_gpu"), slot_link.get("max_gen")),
            max_width=_smallest(pcie.get("max_width"))
            or _smallest(pcie.get("max_width_gpu"), slot_link.get("max_width")),
        )
    ]
    for position in range(len(bridges) - 1):
        if not _faces_up(bridges, position):
            continue
        below, above = bridges[position], bridges[position + 1]
        below_link = below.get("link") or {}
        above_link = above.get("link") or {}
        links.append(
            PathLink(
                device=below["bdf"],
                device_kind=below.get("port_type") or "bridge",
                port=above["bdf"],
                port_kind=above.get("port_type"),
                current_gen=_smallest(below_link.get("current_gen"), above_link.get("current_gen")),
                current_width=_smallest(
                    below_link.get("current_width"), above_link.get("current_width")
                ),
                device_max_gen=below_link.get("max_gen"),
                device_max_width=below_link.get("max_width"),
                port_max_gen=above_link.get("max_gen"),
                port_max_width=above_link.get("max_width"),
                max_gen=_smallest(below_link.get("max_gen"), above_link.get("max_gen")),
                max_width=_smallest(below_link.get("max_width"), above_link.get("max_width")),
            )
        )
    return links


def _limited_by(link: PathLink, attribute: str, expected: int) -> str:
    """`port` when the slot (the end above) cannot do `expected`, else `device`."""
    port_max = getattr(link, f"port_max_{attribute}")
    return "port" if port_max is not None and port_max < expected else "device"


def _end_name(link: PathLink, end: str) -> str:
    if end == "port":
        return f"{(link.port_kind or 'port').replace('_', ' ')} {link.port}"
    if link.device_kind == "gpu":
        return f"the GPU {link.device}"
    return f"{link.device_kind.replace('_', ' ')} {link.device}"


def _gpu_list(bus_ids: Sequence[str]) -> str:
    return ", ".join(bus_ids)


def link_width_findings(
    link: PathLink, expected_width: int | None, label: str, gpus: Sequence[str]
) -> list[Finding]:
    """Width at rest of one link on the path: narrower than expected because an end can do
    no more (PCIE_WIDTH_BELOW_EXPECTED: the slot, or the device, limits it), or trained
    below what both ends can do (PCIE_LINK_TRAINED_BELOW_CAPABILITY: a bad seat, riser
    or cable). `label` names what the link carries ("GPU 1 (model)", "the link ...")."""
    width, capable = link.current_width, link.max_width
    if width is None or expected_width is None or capable is None:
        return []
    evidence = {
        "link": link.to_evidence(),
        "expected_width": expected_width,
        "gpus": list(gpus),
    }
    findings = []
    if capable < expected_width:
        limited_by = _limited_by(link, "width", expected_width)
        end = _end_name(link, limited_by)
        if limited_by == "port" and link.device_kind == "gpu":
            fix = (
                f"the slot offers only x{link.port_max_width}: move the GPU to a "
                f"CPU-attached x{expected_width} slot, or change the BIOS lane split "
                "(bifurcation, lanes shared with M.2/U.2 slots) so this slot gets all its lanes"
            )
        elif limited_by == "port":
            fix = (
                f"{end} offers only x{link.port_max_width}: move the switch (card or riser) "
                f"to a CPU-attached x{expected_width} slot, or change the BIOS lane split "
                "(bifurcation) so this port gets all its lanes"
            )
        elif link.device_kind == "gpu":
            fix = (
                f"the GPU itself can do only x{link.device_max_width}: expect x"
                f"{link.device_max_width} of this model (gpu_checks_expected_links) or use "
                f"a GPU that does x{expected_width}"
            )
        else:
            fix = (
                f"{end} can do only x{link.device_max_width}: the switch's uplink is "
                f"narrower than its GPUs' links; put GPUs that need their full host "
                f"bandwidth behind a x{expected_width} uplink"
            )
        findings.append(
            Finding(
                code="PCIE_WIDTH_BELOW_EXPECTED",
                severity="error",
                subject=link.device,
                message=(
                    f"{label} runs at x{width}, expected x{expected_width}: {end} can do "
                    f"at most x{getattr(link, f'{limited_by}_max_width')}"
                ),
                evidence={**evidence, "limited_by": limited_by},
                fix=fix,
            )
        )
    if width < min(capable, expected_width):
        between = "GPU and slot" if link.device_kind == "gpu" else "both ends"
        findings.append(
            Finding(
                code="PCIE_LINK_TRAINED_BELOW_CAPABILITY",
                severity="error",
                subject=link.device,
                message=(
                    f"{label} trained at x{width} although {between} can do x{capable}"
                    + ("" if link.device_kind == "gpu" else f" (below it: {_gpu_list(gpus)})")
                ),
                evidence={**evidence, "aspect": "width", "basis": "at_rest"},
                fix=(
                    f"{_end_name(link, 'port')} can do x{link.port_max_width} but the link "
                    f"trained at x{width}: reseat the "
                    + ("card" if link.device_kind == "gpu" else "switch card")
                    + ", check the riser or cable, and look for PCIe (AER) errors of "
                    f"{link.device} and {link.port} in the kernel log; then probe again"
                ),
            )
        )
    return findings


def bridge_link_findings(
    link: PathLink, expected: tuple[int | None, int | None], gpus: Sequence[str]
) -> list[Finding]:
    """A bridge link on the path: its width at rest (link_width_findings) and whether its
    ends can negotiate the expected generation. Its generation at rest is never judged
    (links idle low); a bridge link below its generation under load shows in the measured
    host bandwidth (host_bandwidth_findings)."""
    expected_gen, expected_width = expected
    label = link.name[0].upper() + link.name[1:]
    findings = link_width_findings(link, expected_width, label, gpus)
    if expected_gen is not None and link.max_gen is not None and link.max_gen < expected_gen:
        end = _end_name(link, _limited_by(link, "gen", expected_gen))
        findings.append(
            Finding(
                code="PCIE_GEN_BELOW_EXPECTED",
                severity="error",
                subject=link.device,
                message=(
                    f"{label}: its ends can negotiate at most Gen{link.max_gen} ({end}), "
                    f"expected Gen{expected_gen} for {_gpu_list(gpus)}"
                ),
                evidence={
                    "link": link.to_evidence(),
                    "expected_gen": expected_gen,
                    "gpus": list(gpus),
                    "basis": "negotiable_max",
                },
                fix=(
                    f"set {end}'s PCIe link speed to Gen{expected_gen} in the BIOS (Auto may "
                    f"train lower), or use a switch, slot and riser rated for Gen{expected_gen}"
                ),
            )
        )
    return findings


def _link_rate(link: PathLink, width: int | None) -> float | None:
    if link.max_gen not in LANE_GBYTES_PER_S or not width:
        return None
    return raw_link_gbytes_per_s(link.max_gen, width)


def host_bandwidth_findings(
    gpu: Mapping[str, Any], links: Sequence[PathLink], host_copy: Mapping[str, Any] | None
) -> list[Finding]:
    """Measured H2D/D2H copy-engine bandwidth (the probe's, nvbandwidth's method) against
    the floor of what the path can do: the link whose ends allow the least (generation and
    width), times HOST_COPY_EFFICIENCY. A link that trained narrow, or one below its
    generation under load, halves the figure without any other symptom at rest. Figures
    of copies smaller than HOST_COPY_MIN_BYTES are not judged (`size_bytes`)."""
    rated = [(rate, link) for link in links if (rate := _link_rate(link, link.max_width))]
    size_bytes = (host_copy or {}).get("size_bytes")
    if not host_copy or not rated or (size_bytes is not None and size_bytes < HOST_COPY_MIN_BYTES):
        return []
    capacity, bottleneck = min(rated, key=lambda item: item[0])
    assert bottleneck.max_gen is not None and bottleneck.max_width is not None
    floor = host_copy_floor_gbytes_per_s(bottleneck.max_gen, bottleneck.max_width)
    measured = {
        direction: host_copy.get(f"{direction}_gbytes_per_s") for direction in ("h2d", "d2h")
    }
    below = {key: value for key, value in measured.items() if value is not None and value < floor}
    if not below:
        return []
    trained = [(rate, link) for link in links if (rate := _link_rate(link, link.current_width))]
    narrowest_rate, narrowest = min(trained, key=lambda item: item[0]) if trained else (0.0, None)
    words = {"h2d": "host-to-device", "d2h": "device-to-host"}
    figures = " and ".join(f"{value:.1f} GB/s {words[key]}" for key, value in below.items())
    message = (
        f"GPU {gpu['index']} ({gpu.get('model')}) copies {figures}, below the {floor:g} GB/s "
        f"floor of its path (Gen{bottleneck.max_gen} x{bottleneck.max_width}: "
        f"{capacity:.1f} GB/s raw x {HOST_COPY_EFFICIENCY:g})"
    )
    if narrowest is not None and narrowest_rate < capacity:
        message += (
            f"; {narrowest.name} trained at x{narrowest.current_width} (its ends can do "
            f"x{narrowest.max_width})"
        )
        fix = (
            f"bring {narrowest.name} back to x{narrowest.max_width} (its "
            "PCIE_LINK_TRAINED_BELOW_CAPABILITY finding says how), then probe again"
        )
    else:
        fix = (
            "every link on the path trained at full width: read the links on the path "
            "while copies run (lspci -vv -s <bdf>, LnkSta) for one below "
            f"Gen{bottleneck.max_gen}, check the probe's numa_binding and the IOMMU mode, "
            "then probe again"
        )
    return [
        Finding(
            code="PCIE_HOST_BANDWIDTH_BELOW_FLOOR",
            severity="error",
            subject=gpu["bus_id"],
            message=message,
            evidence={
                **{f"{key}_gbytes_per_s": value for key, value in measured.items()},
                "floor_gbytes_per_s": floor,
                "path_max_gen": bottleneck.max_gen,
                "path_max_width": bottleneck.max_width,
                "raw_gbytes_per_s": round(capacity, 1),
                "efficiency": HOST_COPY_EFFICIENCY,
                "narrowest_link": narrowest.to_evidence() if narrowest else None,
                "source": host_copy.get("source"),
            },
            fix=fix,
        )
    ]


def width_findings(gpu: Mapping[str, Any], policy: LinkPolicy) -> list[Finding]:
    """The GPU's own link at rest (link_width_findings), with the GPU's evidence keys."""
    pcie = gpu["pcie"]
    _gen, expected_width = policy.expected(gpu)
    label = f"GPU {gpu['index']} ({gpu.get('model')})"
    findings = link_width_findings(path_links(gpu)[0], expected_width, label, [gpu["bus_id"]])
    gpu_evidence = {
        "current_width": pcie.get("current_width"),
        "max_width": pcie.get("max_width"),
        "max_width_gpu": pcie.get("max_width_gpu"),
        "expected_width": expected_width,
        "upstream_port": pcie.get("upstream_port"),
    }
    return [
        Finding(f.code, f.severity, f.subject, f.message, {**f.evidence, **gpu_evidence}, f.fix)
        for f in findings
    ]


def generation_findings(
    gpu: Mapping[str, Any], policy: LinkPolicy, sample: Mapping[str, Any] | None
) -> list[Finding]:
    pcie = gpu["pcie"]
    expected_gen, _width = policy.expected(gpu)
    if expected_gen is None:
        return []
    negotiable = pcie.get("max_gen")
    summary = load_summary(sample, policy.min_load_s)
    evidence: dict[str, Any] = {
        "current_gen_at_rest": pcie.get("current_gen"),
        "max_gen": negotiable,
        "max_gen_gpu": pcie.get("max_gen_gpu"),
        "expected_gen": expected_gen,
        "upstream_port": pcie.get("upstream_port"),
        "load": summary,
    }
    label = f"GPU {gpu['index']} ({gpu.get('model')})"
    if negotiable is not None and negotiable < expected_gen:
        return [
            Finding(
                code="PCIE_GEN_BELOW_EXPECTED",
                severity="error",
                subject=gpu["bus_id"],
                message=(
                    f"{label}: GPU and slot can negotiate at most Gen{negotiable}, "
                    f"expected Gen{expected_gen}"
                ),
                evidence={**evidence, "basis": "negotiable_max"},
                fix=(
                    f"set the slot's PCIe link speed to Gen{expected_gen} in the BIOS "
                    "(Auto may train lower), or use a slot and riser rated for "
                    f"Gen{expected_gen}"
                ),
            )
        ]
    if summary is None:
        return []
    under_load = summary["gen_under_load"]
    if under_load is None:
        return [
            Finding(
                code="PCIE_GEN_INDETERMINATE",
                severity="info",
                subject=gpu["bus_id"],
                message=(
                    f"{label}: its link generation under load is unknown: {summary['problem']}"
                ),
                evidence={**evidence, "basis": "under_load"},
                fix=(
                    "run the check again (gpu_checks_load_duration_s of at least "
                    f"{summary['min_load_s']:g} s) while nothing holds the GPU in a "
                    "low-power state"
                ),
            )
        ]
    if under_load < expected_gen:
        return [
            Finding(
                code="PCIE_LINK_TRAINED_BELOW_CAPABILITY",
                severity="error",
                subject=gpu["bus_id"],
                message=(
                    f"{label} reached only Gen{under_load} under load although GPU and slot "
                    f"can do Gen{negotiable or expected_gen}, expected Gen{expected_gen}"
                ),
                evidence={**evidence, "aspect": "gen", "basis": "under_load"},
                fix=(
                    "the link does not train up under load: reseat the card, check the "
                    f"riser, and set the slot's link speed to Gen{expected_gen} in the BIOS"
                ),
            )
        ]
    return []


def chipset_findings(gpu: Mapping[str, Any], policy: LinkPolicy) -> list[Finding]:
    reasons = chipset_evidence(gpu, policy.chipset_bridge_ids)
    if not reasons:
        return []
    return [
        Finding(
            code="PCIE_GPU_BEHIND_CHIPSET",
            severity="warning",
            subject=gpu["bus_id"],
            message=(
                f"GPU {gpu['index']} ({gpu.get('model')}) is attached through the chipset, "
                "not a CPU root port: host and peer traffic share the chipset uplink"
            ),
            evidence={
                "reasons": reasons,
                "bridges": [
                    {
                        "bdf": bridge["bdf"],
                        "id": f"{bridge.get('vendor_id')}:{bridge.get('device_id')}",
                        "port_type": bridge.get("port_type"),
                        "max_width": (bridge.get("link") or {}).get("max_width"),
                    }
                    for bridge in gpu.get("bridges") or []
                ],
            },
            fix=(
                "move the GPU to a slot wired to the CPU (the board manual lists which "
                "slots hang off the chipset)"
            ),
        )
    ]


def cmdline_has_pci_noacpi(cmdline: str | None) -> bool:
    try:
        tokens = shlex.split(cmdline or "")
    except ValueError:
        tokens = (cmdline or "").split()
    return any(
        token.startswith("pci=") and "noacpi" in token.split("=", 1)[1].split(",")
        for token in tokens
    )


def numa_findings(facts: Mapping[str, Any], policy: LinkPolicy) -> list[Finding]:
    numa = facts.get("numa") or {}
    counts = [
        policy.numa_node_count,
        numa.get("node_count") or 0,
        len(numa.get("device_nodes", [])),
    ]
    node_count = max(counts)
    noacpi = cmdline_has_pci_noacpi((facts.get("kernel") or {}).get("cmdline"))
    findings = []
    for gpu in facts.get("gpus", []):
        if gpu.get("numa_node") != -1 or gpu.get("lost"):
            continue
        if node_count <= 1 and not noacpi:
            continue
        if noacpi:
            fix = "remove pci=noacpi from the kernel command line (role kernel_cmdline) and reboot"
        else:
            fix = (
                "the firmware reports no proximity for this device: update the BIOS and "
                "enable ACPI NUMA reporting (SRAT, NUMA nodes per socket)"
            )
        findings.append(
            Finding(
                code="NUMA_NODE_MISSING",
                severity="error" if node_count > 1 else "warning",
                subject=gpu["bus_id"],
                message=(
                    f"GPU {gpu['index']} reports numa_node -1"
                    + (f" on a machine with {node_count} NUMA nodes" if node_count > 1 else "")
                    + ": processes cannot be bound next to it"
                ),
                evidence={
                    "numa_node": -1,
                    "numa_node_count": node_count,
                    "pci_noacpi": noacpi,
                    "cmdline": (facts.get("kernel") or {}).get("cmdline"),
                },
                fix=fix,
            )
        )
    return findings


def lost_findings(gpu: Mapping[str, Any]) -> list[Finding]:
    if not gpu.get("lost"):
        return []
    return [
        Finding(
            code="GPU_LOST",
            severity="critical",
            subject=gpu["bus_id"] or f"GPU {gpu['index']}",
            message=f"GPU {gpu['index']} does not answer the driver",
            evidence={"error": gpu.get("error")},
            fix="check the kernel log (Xid 79: fallen off the bus), reseat or replace the GPU",
        )
    ]


def driver_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """NVIDIA GPUs on the PCI bus that no driver answers for: critical when the driver said
    it is not loaded (after a reboot into a kernel its module was not built for, the GPUs
    sit on the bus unusable), a warning when it could not be asked (unknown, never ok).
    A facts document from before the driver's state was recorded counts as unknown when
    only sysfs was read."""
    gpus = facts.get("gpus") or []
    driver = facts.get("driver") if isinstance(facts.get("driver"), Mapping) else None
    if driver is None:
        state = "unknown" if (facts.get("sources") or {}).get("gpus") == "sysfs" else "answers"
        evidence: Any = facts.get("notes") or []
    else:
        state, evidence = driver.get("state"), driver.get("evidence") or []
    if not gpus or state == "answers":
        return []
    bus_ids = _gpu_list([gpu.get("bus_id") or f"GPU {gpu.get('index')}" for gpu in gpus])
    if state == "not_loaded":
        return [
            Finding(
                code="GPU_DRIVER_NOT_LOADED",
                severity="critical",
                subject="node",
                message=(
                    f"the NVIDIA driver is not loaded: {len(gpus)} NVIDIA GPU(s) on the PCI bus"
                    f" ({bus_ids}) and none can be used"
                ),
                evidence={"driver": evidence, "bus_ids": [gpu.get("bus_id") for gpu in gpus]},
                fix=(
                    "load it (modprobe nvidia); when that fails, its module is not built for"
                    " the running kernel (uname -r): build it (dkms status; dkms autoinstall)"
                    " or boot the kernel it was built for, then run site.yml again"
                ),
            )
        ]
    if state == "version_mismatch":
        return [
            Finding(
                code="GPU_DRIVER_VERSION_MISMATCH",
                severity="critical",
                subject="node",
                message=(
                    "the NVIDIA driver's libraries and its loaded kernel module are of different"
                    f" versions, so none of the {len(gpus)} NVIDIA GPU(s) on the PCI bus"
                    f" ({bus_ids}) can be used: NVML and CUDA refuse to start"
                ),
                evidence={"driver": evidence, "bus_ids": [gpu.get("bus_id") for gpu in gpus]},
                fix=(
                    "the driver was updated without loading its new module: reboot the node"
                    " (in its batch), or, with nothing using the GPUs, reload the module"
                    " (rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia; modprobe nvidia);"
                    " compare /proc/driver/nvidia/version with the installed driver package"
                ),
            )
        ]
    return [
        Finding(
            code="GPU_DRIVER_UNKNOWN",
            severity="warning",
            subject="node",
            message=(
                f"neither NVML nor nvidia-smi could be read, so whether the driver answers for"
                f" the {len(gpus)} NVIDIA GPU(s) on the PCI bus ({bus_ids}) is unknown"
            ),
            evidence={"driver": evidence},
            fix=(
                "install the driver's nvidia-smi, or the nvidia-ml-py package where gpu_facts"
                " runs (gpu_facts_nvml_package), and gather the facts again"
            ),
        )
    ]


def check_links(
    facts: Mapping[str, Any],
    policy: LinkPolicy,
    load: Mapping[str, Any] | None = None,
    host_copies: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Finding]:
    """Every PCIe link and NUMA finding of a node; `load` is gpu_link_load's result (or
    load_from_probe's); `host_copies` the measured H2D/D2H figures by bus id
    (host_copies_from_probe), by default those the load samples carry (`host_copy`)."""
    samples = {sample["bus_id"]: sample for sample in (load or {}).get("gpus", [])}
    if host_copies is None:
        host_copies = {
            bus_id: sample["host_copy"]
            for bus_id, sample in samples.items()
            if sample.get("host_copy")
        }
    findings: list[Finding] = driver_findings(facts)
    findings += driver_version_findings(facts)
    for gpu in facts.get("gpus", []):
        if gpu.get("lost"):
            findings += lost_findings(gpu)
            continue
        findings += width_findings(gpu, policy)
        findings += generation_findings(gpu, policy, samples.get(gpu["bus_id"]))
        findings += host_bandwidth_findings(gpu, path_links(gpu), host_copies.get(gpu["bus_id"]))
        findings += chipset_findings(gpu, policy)
        findings += nvlink_findings(gpu, policy.nvlinks_by_model)
        findings += nvlink_error_findings(gpu)
        findings += memory_findings(gpu)
        findings += fabric_findings(gpu)
        findings += clock_event_findings(gpu)
        findings += recovery_action_findings(gpu)
    findings += path_findings(facts, policy)
    findings += acs_redirect_findings(facts)
    findings += numa_findings(facts, policy)
    findings += xid_findings(facts)
    return findings


def path_findings(facts: Mapping[str, Any], policy: LinkPolicy) -> list[Finding]:
    """Every bridge link above the GPUs (bridge_link_findings), once per link, judged
    against the most any GPU below it expects; in bus order of the link's lower end."""
    below: dict[str, list[str]] = {}
    links: dict[str, PathLink] = {}
    expected: dict[str, tuple[int | None, int | None]] = {}
    for gpu in facts.get("gpus", []):
        if gpu.get("lost"):
            continue
        gen, width = policy.expected(gpu)
        for link in path_links(gpu)[1:]:
            links.setdefault(link.device, link)
            below.setdefault(link.device, []).append(gpu["bus_id"])
            known_gen, known_width = expected.get(link.device, (None, None))
            expected[link.device] = (_largest(known_gen, gen), _largest(known_width, width))
    findings: list[Finding] = []
    for device in sorted(links):
        findings += bridge_link_findings(links[device], expected[device], below[device])
    return findings


def _largest(*values: int | None) -> int | None:
    known = [value for value in values if value is not None]
    return max(known) if known else None


ACS_REDIRECT_BITS = ("request_redirect", "completion_redirect")


def acs_redirect_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """Switch ports whose ACS redirects peer requests upstream (one finding per port).

    With ACS request/completion redirect on a switch downstream port, P2P between GPUs
    behind that switch goes up to the root complex instead of across the switch: slower,
    and subject to IOMMU translation. It matters only where another GPU behind the same
    switch talks to this one over PCIe (NVLink pairs do not use the switch for P2P). It is
    a PCIe setting (setpci or BIOS), reapplied every boot, so it is reported and fixing it
    stays opt-in.
    """
    gpus = [gpu for gpu in facts.get("gpus", []) if not gpu.get("lost")]
    topology = facts.get("topology") or []
    below: dict[str, set[int]] = {}
    for gpu in gpus:
        for bridge in gpu.get("bridges") or []:
            below.setdefault(bridge["bdf"], set()).add(gpu["index"])

    def pcie_peers(gpu: Mapping[str, Any], upstream: str) -> list[int]:
        row = topology[gpu["index"]] if gpu["index"] < len(topology) else []
        return [
            other
            for other in sorted(below.get(upstream, set()) - {gpu["index"]})
            if other >= len(row) or not str(row[other]).startswith("NV")
        ]

    findings: list[Finding] = []
    seen: set[str] = set()
    for gpu in gpus:
        bridges = gpu.get("bridges") or []
        for position, bridge in enumerate(bridges):
            acs = bridge.get("acs") or {}
            redirect = [bit for bit in ACS_REDIRECT_BITS if acs.get(bit)]
            if bridge.get("port_type") != "switch_downstream" or not redirect:
                continue
            upstream = bridges[position + 1]["bdf"] if position + 1 < len(bridges) else ""
            peers = pcie_peers(gpu, upstream)
            if not peers or bridge["bdf"] in seen:
                continue
            seen.add(bridge["bdf"])
            findings.append(
                Finding(
                    code="PCIE_ACS_REDIRECT",
                    severity="warning",
                    subject=bridge["bdf"],
                    message=(
                        f"switch port {bridge['bdf']} above GPU {gpu['index']} has ACS "
                        f"{' and '.join(bit.replace('_', ' ') for bit in redirect)} on: its "
                        f"peer traffic with GPU {', '.join(map(str, peers))} behind the same "
                        "switch is sent up to the root complex"
                    ),
                    evidence={"acs_control": acs.get("control"), "redirect": redirect},
                    fix=(
                        "where isolation between the devices behind the switch is not needed, "
                        f"add {bridge['bdf']} to pcie_acs_redirect_off_bridges (role pcie_acs "
                        "turns redirect off at every boot) or turn it off in the BIOS, then "
                        "probe again"
                    ),
                )
            )
    return findings


def probe_age_s(probe: Mapping[str, Any], now_s: float) -> float | None:
    """Seconds since the probe was taken (None: no readable timestamp)."""
    try:
        taken = datetime.strptime(str(probe.get("timestamp")), PROBE_TIME_FORMAT)
    except ValueError:
        return None
    return now_s - taken.replace(tzinfo=timezone.utc).timestamp()


def _fresh_probe(
    probe: Mapping[str, Any] | None, max_age_s: float | None, now_s: float | None
) -> bool:
    """A probe to use: given, and younger than `max_age_s` when that is given."""
    if not probe:
        return False
    if max_age_s is None:
        return True
    age_s = probe_age_s(probe, time.time() if now_s is None else now_s)
    return age_s is not None and age_s <= max_age_s


def _host_copy(gpu: Mapping[str, Any], probe: Mapping[str, Any]) -> dict[str, Any] | None:
    figures = {key: gpu.get(key) for key in ("h2d_gbytes_per_s", "d2h_gbytes_per_s")}
    if gpu.get("error") or all(value is None for value in figures.values()):
        return None
    size_bytes = (probe.get("parameters") or {}).get("size_bytes")
    return {**figures, "size_bytes": size_bytes, "source": f"probe of {probe.get('timestamp')}"}


def host_copies_from_probe(
    probe: Mapping[str, Any] | None,
    *,
    max_age_s: float | None = None,
    now_s: float | None = None,
) -> dict[str, dict[str, Any]]:
    """The probe's H2D/D2H copy-engine figures by bus id (empty when the probe is older
    than `max_age_s`: a stale figure says nothing about the links now)."""
    if not _fresh_probe(probe, max_age_s, now_s):
        return {}
    assert probe is not None
    copies = {}
    for gpu in probe.get("gpus") or []:
        figures = _host_copy(gpu, probe)
        if figures is not None:
            copies[str(gpu.get("bus_id"))] = figures
    return copies


def load_from_probe(
    probe: Mapping[str, Any] | None,
    *,
    max_age_s: float | None = None,
    now_s: float | None = None,
) -> dict[str, Any] | None:
    """The probe's per-GPU link readings under load, in gpu_link_load's shape, each with
    the GPU's measured host figures (`host_copy`, see host_copies_from_probe).

    With `max_age_s`, None when the probe is older than that (or its age is unknown): a
    stale reading says nothing about the link now.
    """
    if not _fresh_probe(probe, max_age_s, now_s):
        return None
    assert probe is not None
    gpus = []
    for gpu in probe.get("gpus") or []:
        reading = gpu.get("link_under_load")
        if not reading or gpu.get("error") or gpu.get("skipped"):
            continue
        gpus.append(
            {
                "bus_id": gpu.get("bus_id"),
                "possible": True,
                "reading": dict(reading),
                "source": f"probe of {probe.get('timestamp')}",
                "host_copy": _host_copy(gpu, probe),
            }
        )
    return {"possible": bool(gpus), "gpus": gpus}


def probe_readings_problem(
    probe: Mapping[str, Any] | None,
    facts: Mapping[str, Any],
    *,
    max_age_s: float,
    min_load_s: float,
    now_s: float | None = None,
) -> str | None:
    """Why the probe's link readings cannot stand in for a load sample (None: they can):
    no probe, older than `max_age_s`, or a GPU without a reading that counts."""
    if not probe:
        return "there is no probe result"
    age_s = probe_age_s(probe, time.time() if now_s is None else now_s)
    if age_s is None or age_s > max_age_s:
        age = "of unknown age" if age_s is None else f"{age_s:.0f} s old"
        return f"the probe of {probe.get('timestamp')} is {age} (max {max_age_s:g} s)"
    readings = {
        sample["bus_id"]: sample for sample in (load_from_probe(probe) or {}).get("gpus", [])
    }
    for gpu in facts.get("gpus") or []:
        if gpu.get("lost"):
            continue
        sample = readings.get(gpu.get("bus_id"))
        if sample is None:
            return f"the probe has no link reading of GPU {gpu.get('index')}"
        problem = reading_problem(sample["reading"], min_load_s)
        if problem is not None:
            return f"the probe's reading of GPU {gpu.get('index')} does not count: {problem}"
    return None


def _sticky(error: str) -> bool:
    return any(name in error for name in STICKY_CUDA_ERRORS)


def probe_gpu_findings(
    probe: Mapping[str, Any] | None, facts: Mapping[str, Any] | None = None
) -> list[Finding]:
    """A GPU the probe could not use through the CUDA driver (entry `error`): error, or
    critical when its context died (it stopped working); the subject is its bus id, so
    the planner leaves it out. GPUs the facts already report lost (GPU_LOST) are left to
    that finding."""
    if not probe:
        return []
    lost = {gpu.get("bus_id") for gpu in (facts or {}).get("gpus") or [] if gpu.get("lost")}
    findings = []
    for gpu in probe.get("gpus") or []:
        error = gpu.get("error")
        if not error or gpu.get("bus_id") in lost:
            continue
        sticky = _sticky(str(error))
        findings.append(
            Finding(
                code="PROBE_GPU_FAILED",
                severity="critical" if sticky else "error",
                subject=gpu.get("bus_id") or f"GPU {gpu.get('index')}",
                message=(
                    f"GPU {gpu.get('index')} ({gpu.get('bus_id')}) could not be used through "
                    f"the CUDA driver during the probe of {probe.get('timestamp')}"
                ),
                evidence={"error": error, "uuid": gpu.get("uuid")},
                fix=(
                    "check the kernel log for Xid errors and nvidia-smi; reset or replace "
                    "the GPU, then probe again"
                    if sticky
                    else "follow the error's meaning, then probe again"
                ),
            )
        )
    return findings


FAIL_ON_CHOICES = ("info", "warning", "error", "critical", "never")


# How a load sample is taken (gpu_link_load's options, and gpu_link_check's ``sample``).
SAMPLE_ARGUMENT_SPEC = {
    "duration_s": {"type": "float", "default": 1.0},
    "size_mib": {"type": "int", "default": 64},
    "cuda_library": {"type": "str", "default": "libcuda.so.1"},
    "use_nvml": {"type": "bool", "default": True},
    "nvml_python_path": {"type": "list", "elements": "str", "default": []},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
}


def sample_decision(params: Mapping[str, Any]) -> tuple[bool, str | None]:
    """For gpu_link_check's options (JUDGE_ARGUMENT_SPEC, validated): whether to take a
    load sample first, and the note that says why or why not (None without ``sample``)."""
    if params["sample"] is None or params["load"] is not None:
        return False, None
    if params["probe"] is None:
        return True, "load sampled: no probe result to take the readings from"
    problem = probe_readings_problem(
        params["probe"],
        params["facts"],
        max_age_s=params["probe_max_age_s"],
        min_load_s=params["load_min_s"],
    )
    if problem is not None:
        return True, f"load sampled: {problem}"
    stamp = params["probe"].get("timestamp")
    return False, f"the readings of the probe of {stamp} stand: no load sample taken"


# The options of the gpu_link_check module and of its action plugin (the same judgement,
# on the node or on the controller).
JUDGE_ARGUMENT_SPEC = {
    "facts": {"type": "dict", "required": True},
    "load": {"type": "dict"},
    "sample": {"type": "dict", "options": SAMPLE_ARGUMENT_SPEC},
    "probe": {"type": "dict"},
    "expected_links": {"type": "dict", "default": {}},
    "expected_link_default": {"type": "dict", "default": {}},
    "chipset_bridge_ids": {"type": "list", "elements": "str", "default": []},
    "numa_node_count": {"type": "int", "default": 0},
    "nvlinks_by_model": {"type": "dict", "default": {}},
    "load_min_s": {"type": "float", "default": MIN_LOAD_S},
    "probe_max_age_s": {"type": "float", "default": 3600.0},
    "fail_on": {"type": "str", "choices": list(FAIL_ON_CHOICES), "default": "error"},
    "defer_failure": {"type": "bool", "default": False},
    "finding_severity": {"type": "dict", "default": {}},
}


def judge_links(
    facts: Mapping[str, Any],
    policy_vars: Mapping[str, Any],
    *,
    load: Mapping[str, Any] | None = None,
    probe: Mapping[str, Any] | None = None,
    fail_on: str = "error",
    probe_max_age_s: float | None = None,
    now_s: float | None = None,
    finding_severity: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], str | None]:
    """The gpu_checks result for one node, and the failure message when it must fail.

    One function for the role's module (on the node) and its action plugin (on the
    controller): the facts document, the policy (``expected_links``,
    ``expected_link_default``, ``chipset_bridge_ids``, ``numa_node_count``,
    ``nvlinks_by_model``, ``load_min_s``), a load sample or else the probe's readings
    under load (only while the probe is younger than `probe_max_age_s`, when given), and
    the severity at which the node fails. GPUs the probe could not use are findings too
    (probe_gpu_findings). ``finding_severity`` (the fleet's severity per finding code,
    ``lingbot_fleet_finding_severity``) is applied to every finding before anything
    decides with a severity: the failure at ``fail_on``, the planner (the fact
    ``lingbot_link_findings``) and the rollout gate (the registered findings).
    """
    if fail_on not in FAIL_ON_CHOICES:
        raise ValueError(f"fail_on is {fail_on!r}; use one of {', '.join(FAIL_ON_CHOICES)}")
    problems = schema_problems(facts)
    if problems:
        raise ValueError(f"facts are not a lingbot_gpu document: {'; '.join(problems)}")
    readings = load or load_from_probe(probe, max_age_s=probe_max_age_s, now_s=now_s)
    host_copies = host_copies_from_probe(probe, max_age_s=probe_max_age_s, now_s=now_s)
    findings = check_links(facts, LinkPolicy.from_vars(policy_vars), readings, host_copies)
    findings += probe_gpu_findings(probe, facts)
    findings = override_severities(findings, finding_severity or {}, "finding_severity")
    rows = [finding.to_dict() for finding in findings]
    result = {
        "changed": False,
        "findings": rows,
        "counts": count_by_severity(findings),
        "summary": [
            f"{severity_label(f)} {f['code']} {f['subject']}: {f['message']}" for f in rows
        ],
    }
    # For the planner (lingbot_plan), which decides with the findings as the audit does.
    result["ansible_facts"] = {"lingbot_link_findings": result["findings"]}
    if fail_on == "never":
        return result, None
    failing = at_or_above(findings, fail_on)
    if not failing:
        return result, None
    summary = "; ".join(f"{f.code} {f.subject}: {f.message}" for f in failing)
    return result, f"{len(failing)} finding(s) at or above {fail_on}: {summary}"


def judge_options(params: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """``judge_links`` with the options of JUDGE_ARGUMENT_SPEC, validated (module and
    action plugin alike)."""
    return judge_links(
        params["facts"],
        params,
        load=params["load"],
        probe=params["probe"],
        fail_on=params["fail_on"],
        probe_max_age_s=params["probe_max_age_s"],
        finding_severity=params["finding_severity"],
    )
