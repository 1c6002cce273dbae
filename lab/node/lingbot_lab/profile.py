"""Hardware profile: validation and defaults (schema 1, see lab/CONTRACT.md).

validate_profile() takes the raw mapping (YAML on the host, JSON on the node) and returns a
new, fully defaulted mapping or raises ValueError naming the profile, the field and the fix.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

NVIDIA_VENDOR_ID = 0x10DE
PORT_KINDS = ("root_port", "switch_upstream", "switch_downstream", "chipset_port")
OS_FAMILIES = ("Debian", "RedHat")
CPU_VENDORS = ("AMD", "Intel")
IOMMU_MODES = ("off", "translated", "passthrough")
LINK_WIDTHS = (1, 2, 4, 8, 12, 16, 32)
MAX_PCIE_GEN = 5
# Milliseconds of sustained copies before a link idling below max_gen retrains to it
# (libnvidia-ml and nvidia-smi read it; libcuda's busy/<i> records the load).
DEFAULT_LINK_RAMP_MS = 250
FAULT_KINDS = (
    "gpu_lost",
    "p2p_write_drop_when_iommu_translated",
    "device_fails_after_copies",
    "driver_not_loaded",
    "nvlink_down",
    "row_remap_pending",
    "row_remap_failed",
    "ecc_uncorrected",
    "driver_library_mismatch",
    "fabric_manager_down",
    "fabric_manager_version",
    "xid",
    "clock_throttle",
    "recovery_action",
    "nvlink_errors",
    "pages_retired",
)
# NVML's NVLink error counters (nvmlNvLinkErrorCounter_t) by the names an nvlink_errors
# fault gives.
NVLINK_ERROR_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3, "ecc_data": 4}
# A path's measured figure sets: what a copy of that kind takes (paths[].<key>).
PATH_FIGURE_SETS = ("p2p", "host_staged", "p2p_iommu_translated", "p2p_without_acs_redirect")
PATH_FIGURES = ("gbytes_per_s", "bidir_gbytes_per_s", "latency_ns")
# ACS control bits that send a switch's peer-to-peer requests or completions upstream.
ACS_REDIRECT_FLAGS = ("request_redirect", "completion_redirect")
ACS_FLAGS = (
    "source_validation",
    "request_redirect",
    "completion_redirect",
    "upstream_forwarding",
    "p2p_egress_control",
    "direct_translated",
)
# The distributions each family's boot configuration can look like (the first is the
# default): Debian's or Ubuntu's grub-mkconfig scripts and /etc/default/grub; RHEL's BLS.
DISTRIBUTIONS = {"Debian": ("debian", "ubuntu"), "RedHat": ("rhel",)}
DEFAULT_KERNEL_VERSION = {
    "debian": "6.1.0-18-amd64",
    "ubuntu": "6.8.0-31-generic",
    "rhel": "5.14.0-362.24.1.el9_3.x86_64",
}
DEFAULT_ROOT_UUID = "6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b"
# The startup costs libcuda makes real (wall-clock) time of, as a driver does: bringing a GPU
# up when persistence mode is off (a GPU in persistence mode stays initialized), creating a
# process's first context on a GPU, and a context's first peer mapping to another GPU.
DEFAULT_DRIVER = {
    "version": "550.54.15",
    "cuda_driver_version": 12040,
    "gpu_init_ms": 400,
    "context_create_ms": 150,
    "peer_mapping_ms": 40,
}
# PCI subsystem device ids of the reference boards, keyed by PCI device id.
DEFAULT_SUBSYSTEM_DEVICE_ID = {0x2230: 0x1459, 0x2330: 0x16C1, 0x26B9: 0x1851, 0x2204: 0x1454}
# (vendor id, device id) of bridges when the profile does not name them.
DEFAULT_PORT_IDS = {
    ("AMD", "root_port"): (0x1022, 0x1483),
    ("Intel", "root_port"): (0x8086, 0x347A),
    ("AMD", "chipset_port"): (0x1022, 0x43EA),
    ("Intel", "chipset_port"): (0x8086, 0x7A38),
    ("AMD", "switch_upstream"): (0x1000, 0xC010),
    ("Intel", "switch_upstream"): (0x1000, 0xC010),
    ("AMD", "switch_downstream"): (0x1000, 0xC010),
    ("Intel", "switch_downstream"): (0x1000, 0xC010),
}
BDF_PATTERN = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")
HOST_BRIDGE_PATTERN = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
UUID_PATTERN = re.compile(
    r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
CPULIST_PATTERN = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


class ProfileChecker:
    """Builds error messages that name the profile, the field and the fix."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, field: str, problem: str, fix: str) -> None:
        raise ValueError(f"profile {self.name}: {field}: {problem}; fix: {fix}")

    def require(self, mapping: dict[str, Any], key: str, where: str) -> Any:
        if not isinstance(mapping, dict):
            self.fail(where, f"expected a mapping, got {type(mapping).__name__}", "write a mapping")
        if key not in mapping or mapping[key] is None:
            self.fail(f"{where}.{key}" if where else key, "missing", f"set {key}")
        return mapping[key]

    def integer(self, value: Any, field: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(field, f"{value!r} is not an integer in {low}..{high}", "use a valid number")
        return value

    def number(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            self.fail(field, f"{value!r} is not a positive number", "use a measured value > 0")
        return value

    def choice(self, value: Any, field: str, choices: tuple[Any, ...]) -> Any:
        if value not in choices or isinstance(value, bool):
            fix = "pick one"
            if value is False and "off" in choices:
                fix = 'write "off" in quotes (YAML reads a bare off as false)'
            self.fail(field, f"{value!r} is not one of {', '.join(map(str, choices))}", fix)
        return value

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(field, f"{value!r} is not a non-empty string", "write a string")
        return value


def parse_cpulist(cpulist: str) -> list[int]:
    """'0-3,8' -> [0, 1, 2, 3, 8]."""
    cpus: list[int] = []
    for part in cpulist.split(","):
        first, _, last = part.partition("-")
        cpus.extend(range(int(first), int(last or first) + 1))
    return cpus


def format_cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8' (the kernel's cpulist format)."""
    ranges: list[str] = []
    ordered = sorted(set(cpus))
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[index], ordered[end]
        ranges.append(str(first) if first == last else f"{first}-{last}")
        index = end + 1
    return ",".join(ranges)


def ancestors(profile: dict[str, Any], bdf: str) -> list[str]:
    """Port bdfs from the device's parent up to (and including) its host bridge id."""
    parents = {port["bdf"]: port["parent"] for port in profile["pcie_ports"]}
    parents.update({gpu["bdf"]: gpu["parent"] for gpu in profile["gpus"]})
    chain: list[str] = []
    current = parents[bdf]
    while True:
        chain.append(current)
        if current not in parents:
            return chain
        current = parents[current]


def acs_redirect_ports(profile: dict[str, Any], bdf_a: str, bdf_b: str) -> list[str]:
    """The switch downstream ports whose ACS redirect decides the route of peer traffic
    between two devices: where their paths meet in a switch, the downstream port of that
    switch on each side (a peer request entering there turns around in the switch unless
    the port redirects it upstream). Empty when the paths meet only in a root complex.
    Downstream ports of lower switches forward the request upstream either way."""
    chain_a = ancestors(profile, bdf_a)
    chain_b = ancestors(profile, bdf_b)
    common = next((bridge for bridge in chain_a if bridge in chain_b), None)
    kinds = {port["bdf"]: port["kind"] for port in profile["pcie_ports"]}
    if common is None or kinds.get(common) != "switch_upstream":
        return []
    below = [chain[: chain.index(common)] for chain in (chain_a, chain_b)]
    sides = [ports[-1] for ports in below if ports]
    return [bdf for bdf in sides if kinds.get(bdf) == "switch_downstream"]


def acs_redirects(port: dict[str, Any]) -> bool:
    return any(port["acs"][flag] for flag in ACS_REDIRECT_FLAGS)


def _check_numa_nodes(check: ProfileChecker, profile: dict[str, Any]) -> None:
    nodes = check.require(profile, "numa_nodes", "")
    if not isinstance(nodes, list) or not nodes:
        check.fail("numa_nodes", "empty", "list at least one {id, cpus}")
    seen_cpus: set[int] = set()
    for position, node in enumerate(nodes):
        where = f"numa_nodes[{position}]"
        check.integer(check.require(node, "id", where), f"{where}.id", 0, 63)
        cpus = check.string(check.require(node, "cpus", where), f"{where}.cpus")
        if not CPULIST_PATTERN.match(cpus):
            check.fail(f"{where}.cpus", f"{cpus!r} is not a cpulist", 'write e.g. "0-15,32-47"')
        overlap = seen_cpus.intersection(parse_cpulist(cpus))
        if overlap:
            check.fail(f"{where}.cpus", f"CPU {min(overlap)} is in two NUMA nodes", "split them")
        seen_cpus.update(parse_cpulist(cpus))
    if [node["id"] for node in nodes] != list(range(len(nodes))):
        check.fail("numa_nodes", "ids are not 0, 1, ... in order", "number the nodes from 0")


def _check_link(check: ProfileChecker, link: Any, where: str, keys: tuple[str, ...]) -> None:
    if not isinstance(link, dict):
        check.fail(where, "missing", "write {gen: 4, width: 16, max_gen: 4, max_width: 16}")
    for key in keys:
        value = check.require(link, key, where)
        if "width" in key:
            check.choice(value, f"{where}.{key}", LINK_WIDTHS)
        else:
            check.integer(value, f"{where}.{key}", 1, MAX_PCIE_GEN)


def _check_ports(check: ProfileChecker, profile: dict[str, Any], cpu_vendor: str) -> None:
    bridges = check.require(profile, "host_bridges", "")
    if not isinstance(bridges, list) or not bridges:
        check.fail("host_bridges", "empty", "list at least one {id: pci0000:00, numa_node: 0}")
    node_ids = {node["id"] for node in profile["numa_nodes"]}
    known: set[str] = set()
    for position, bridge in enumerate(bridges):
        where = f"host_bridges[{position}]"
        bridge_id = check.string(check.require(bridge, "id", where), f"{where}.id")
        if not HOST_BRIDGE_PATTERN.match(bridge_id):
            check.fail(
                f"{where}.id", f"{bridge_id!r} is not a host bridge id", 'write "pci0000:40"'
            )
        check.choice(
            check.require(bridge, "numa_node", where), f"{where}.numa_node", tuple(node_ids)
        )
        if bridge_id in known:
            check.fail(f"{where}.id", f"duplicate host bridge {bridge_id}", "give each a unique id")
        known.add(bridge_id)
    ports = profile.setdefault("pcie_ports", [])
    for position, port in enumerate(ports):
        where = f"pcie_ports[{position}]"
        bdf = _check_bdf(check, port, where, known)
        check.choice(check.require(port, "kind", where), f"{where}.kind", PORT_KINDS)
        parent = check.require(port, "parent", where)
        if parent not in known:
            check.fail(
                f"{where}.parent",
                f"unknown parent {parent!r} of {bdf}",
                "name a host bridge id or a port listed before this one",
            )
        link = check.require(port, "link", where)
        _check_link(check, link, f"{where}.link", ("gen", "width", "max_gen", "max_width"))
        if link["gen"] > link["max_gen"] or link["width"] > link["max_width"]:
            check.fail(f"{where}.link", "gen/width above max_gen/max_width", "lower gen or width")
        acs = port.setdefault("acs", {})
        for flag in ACS_FLAGS:
            acs[flag] = bool(acs.get(flag, False))
        unknown_flags = set(acs) - set(ACS_FLAGS)
        if unknown_flags:
            check.fail(f"{where}.acs", f"unknown flag {sorted(unknown_flags)[0]}", "remove it")
        _check_link_partner(check, port, where, ports[:position])
        vendor_id, device_id = DEFAULT_PORT_IDS[(cpu_vendor, port["kind"])]
        port.setdefault("vendor_id", vendor_id)
        port.setdefault("device_id", device_id)
        known.add(bdf)


def _check_link_partner(
    check: ProfileChecker, port: dict[str, Any], where: str, earlier: list[dict[str, Any]]
) -> None:
    """A switch's upstream port and the port above it are the two ends of one link: they
    trained at the same generation and width (each end keeps its own max_gen/max_width)."""
    above = next((other for other in earlier if other["bdf"] == port["parent"]), None)
    if port["kind"] != "switch_upstream" or above is None:
        return
    ends = [(end["link"]["gen"], end["link"]["width"]) for end in (port, above)]
    if ends[0] != ends[1]:
        (gen, width), (above_gen, above_width) = ends
        check.fail(
            f"{where}.link",
            f"trained at Gen{gen} x{width} but the other end of its link, port "
            f"{above['bdf']}, at Gen{above_gen} x{above_width}",
            "give both ends of the link the same gen and width (max_gen/max_width may differ)",
        )


def _check_bdf(check: ProfileChecker, item: dict[str, Any], where: str, known: set[str]) -> str:
    bdf = check.string(check.require(item, "bdf", where), f"{where}.bdf")
    if not BDF_PATTERN.match(bdf):
        check.fail(f"{where}.bdf", f"{bdf!r} is not a PCI address", 'write "0000:41:00.0"')
    if bdf in known:
        check.fail(f"{where}.bdf", f"duplicate bdf {bdf}", "give every device its own address")
    return bdf


def _check_gpu(
    check: ProfileChecker, gpu: dict[str, Any], where: str, known: set[str], ports: dict[str, Any]
) -> None:
    bdf = _check_bdf(check, gpu, where, known)
    parent = check.require(gpu, "parent", where)
    if parent not in known:
        check.fail(f"{where}.parent", f"unknown parent {parent!r} of {bdf}", "name a port's bdf")
    for key in ("model", "uuid", "serial"):
        check.string(check.require(gpu, key, where), f"{where}.{key}")
    if not UUID_PATTERN.match(gpu["uuid"]):
        check.fail(f"{where}.uuid", f"{gpu['uuid']!r} is not a GPU UUID", 'write "GPU-<uuid4>"')
    gpu.setdefault("brand", "NVIDIA")
    device_id = check.integer(check.require(gpu, "pci_device_id", where), where, 0, 0xFFFF)
    gpu.setdefault("pci_subsystem_device_id", DEFAULT_SUBSYSTEM_DEVICE_ID.get(device_id, 0))
    check.integer(check.require(gpu, "memory_mib", where), f"{where}.memory_mib", 1, 1 << 24)
    link = check.require(gpu, "link", where)
    _check_link(check, link, f"{where}.link", ("max_gen", "max_width"))
    link.setdefault("max_gen_gpu", link["max_gen"])
    link.setdefault("max_width_gpu", link["max_width"])
    link.setdefault("width", link["max_width"])
    link.setdefault("gen_idle", link["max_gen"])
    keys = ("max_gen_gpu", "max_width_gpu", "width", "gen_idle")
    _check_link(check, link, f"{where}.link", keys)
    link.setdefault("ramp_ms", DEFAULT_LINK_RAMP_MS)
    check.integer(link["ramp_ms"], f"{where}.link.ramp_ms", 0, 60_000)
    if link["max_gen"] > link["max_gen_gpu"] or link["max_width"] > link["max_width_gpu"]:
        check.fail(f"{where}.link", "max_gen/max_width above the GPU's own", "lower them")
    if link["width"] > link["max_width"] or link["gen_idle"] > link["max_gen"]:
        check.fail(f"{where}.link", "width/gen_idle above max_width/max_gen", "lower them")
    port = ports.get(parent)
    if port is not None and (
        link["max_gen"] > port["link"]["max_gen"] or link["max_width"] > port["link"]["max_width"]
    ):
        check.fail(
            f"{where}.link",
            f"max_gen/max_width above what port {parent} can do",
            "lower them or raise the port's max_gen/max_width",
        )
    host = check.require(gpu, "host", where)
    for key in ("h2d_gbytes_per_s", "d2h_gbytes_per_s", "latency_ns"):
        check.number(check.require(host, key, f"{where}.host"), f"{where}.host.{key}")
    gpu.setdefault("nvlinks", [])
    gpu.setdefault("mig", False)
    gpu.setdefault("persistence_default", 0)
    check.choice(gpu["persistence_default"], f"{where}.persistence_default", (0, 1))


def _check_nvlinks(check: ProfileChecker, gpus: list[dict[str, Any]]) -> None:
    for index, gpu in enumerate(gpus):
        for position, nvlink in enumerate(gpu["nvlinks"]):
            where = f"gpus[{index}].nvlinks[{position}]"
            check.integer(check.require(nvlink, "count", where), f"{where}.count", 1, 18)
            target = check.require(nvlink, "to", where)
            if target != "nvswitch" and (
                isinstance(target, bool)
                or not isinstance(target, int)
                or not 0 <= target < len(gpus)
                or target == index
            ):
                check.fail(f"{where}.to", f"{target!r} is not another GPU", 'use "nvswitch" or 0..')


def _check_paths(check: ProfileChecker, profile: dict[str, Any]) -> None:
    gpu_count = len(profile["gpus"])
    paths = profile.setdefault("paths", [])
    seen: set[tuple[int, int]] = set()
    for position, path in enumerate(paths):
        where = f"paths[{position}]"
        between = check.require(path, "between", where)
        if (
            not isinstance(between, list)
            or len(between) != 2
            or not all(isinstance(i, int) and 0 <= i < gpu_count for i in between)
            or between[0] == between[1]
        ):
            check.fail(
                f"{where}.between",
                f"{between!r} does not name two GPUs (0..{gpu_count - 1})",
                "write [a, b] with GPU indices",
            )
        pair = (min(between), max(between))
        if pair in seen:
            check.fail(f"{where}.between", f"second path for GPUs {list(pair)}", "keep one")
        seen.add(pair)
        path.setdefault("p2p_iommu_translated", None)
        path.setdefault("p2p_without_acs_redirect", None)
        path.setdefault("p2p", None)
        if path["p2p"] is None and "host_staged" not in path:
            check.fail(f"{where}", "neither p2p nor host_staged", "add host_staged")
        for key in PATH_FIGURE_SETS:
            measured = path.get(key)
            if measured is None:
                if key == "host_staged":
                    check.fail(f"{where}.host_staged", "missing", "add the measured values")
                continue
            for field in PATH_FIGURES:
                check.number(check.require(measured, field, f"{where}.{key}"), f"{where}.{key}")
        if path["p2p_without_acs_redirect"] is not None:
            _check_without_acs_redirect(check, profile, path, where)
    for first in range(gpu_count):
        for second in range(first + 1, gpu_count):
            if (first, second) not in seen:
                check.fail(
                    "paths",
                    f"no path for GPUs [{first}, {second}]",
                    f"add a path with between: [{first}, {second}]",
                )


def _check_without_acs_redirect(
    check: ProfileChecker, profile: dict[str, Any], path: dict[str, Any], where: str
) -> None:
    """p2p_without_acs_redirect is the pair's P2P once no port in acs_redirect_ports
    redirects; p2p is then the figure with the profile's (redirecting) ACS settings."""
    field = f"{where}.p2p_without_acs_redirect"
    pair = sorted(path["between"])
    if path["p2p"] is None:
        check.fail(field, f"GPUs {pair} have no p2p path", "remove it or add p2p")
    bdfs = [profile["gpus"][index]["bdf"] for index in pair]
    port_bdfs = acs_redirect_ports(profile, *bdfs)
    if not port_bdfs:
        check.fail(
            field,
            f"the paths of GPUs {pair} do not meet in a PCIe switch, so no port's ACS redirect "
            "changes their route",
            "remove p2p_without_acs_redirect (p2p is the figure)",
        )
    ports = {port["bdf"]: port for port in profile["pcie_ports"]}
    if not any(acs_redirects(ports[bdf]) for bdf in port_bdfs):
        check.fail(
            field,
            f"no port on the path of GPUs {pair} ({', '.join(port_bdfs)}) has ACS "
            "request_redirect or completion_redirect, so p2p already is the figure without "
            "redirect",
            "remove p2p_without_acs_redirect, or set request_redirect/completion_redirect in "
            "those ports' acs and make p2p the redirected figure",
        )


# Fault kinds that name a GPU (gpu: index).
GPU_FAULT_KINDS = (
    "gpu_lost",
    "device_fails_after_copies",
    "nvlink_down",
    "row_remap_pending",
    "row_remap_failed",
    "ecc_uncorrected",
    "xid",
    "clock_throttle",
    "recovery_action",
    "nvlink_errors",
    "pages_retired",
)


def _check_faults(check: ProfileChecker, profile: dict[str, Any]) -> None:
    faults = profile.setdefault("faults", [])
    for position, fault in enumerate(faults):
        where = f"faults[{position}]"
        kind = check.choice(check.require(fault, "kind", where), f"{where}.kind", FAULT_KINDS)
        if kind in GPU_FAULT_KINDS:
            gpu = check.require(fault, "gpu", where)
            check.integer(gpu, f"{where}.gpu", 0, len(profile["gpus"]) - 1)
        check_kind = FAULT_CHECKS.get(kind)
        if check_kind is not None:
            check_kind(check, profile, fault, where)


def _check_count(key: str) -> Callable[[ProfileChecker, dict[str, Any], dict[str, Any], str], None]:
    """The check of a fault whose one field ``key`` is a whole number from 1 on."""

    def check_fault(
        check: ProfileChecker, _profile: dict[str, Any], fault: dict[str, Any], where: str
    ) -> None:
        check.integer(check.require(fault, key, where), f"{where}.{key}", 1, 1 << 30)

    return check_fault


def _check_library_mismatch_fault(
    check: ProfileChecker, _profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    version = check.require(fault, "library_version", where)
    if not isinstance(version, str) or not version.strip():
        check.fail(
            f"{where}.library_version",
            f"{version!r} is not a driver version",
            'write the libraries\' version in quotes, e.g. "550.90.07"',
        )


def _check_pages_retired_fault(
    check: ProfileChecker, _profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    """pages_retired {gpu, single_bit, double_bit, pending}: pages retired per cause."""
    for cause in ("single_bit", "double_bit"):
        check.integer(fault.setdefault(cause, 0), f"{where}.{cause}", 0, 1 << 16)
    if not isinstance(fault.setdefault("pending", False), bool):
        check.fail(
            f"{where}.pending",
            f"{fault['pending']!r} is not true or false",
            "write true (pages wait for a GPU reset) or false",
        )


def _check_nvlink_down_fault(
    check: ProfileChecker, profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    gpu_links = sum(link["count"] for link in profile["gpus"][fault["gpu"]]["nvlinks"])
    check.integer(check.require(fault, "links", where), f"{where}.links", 1, 18)
    if fault["links"] > gpu_links:
        check.fail(
            f"{where}.links",
            f"{fault['links']} is more than the {gpu_links} NVLinks of gpus[{fault['gpu']}]",
            "give at most that many, or give the GPU its nvlinks",
        )


def _check_xid_fault(
    check: ProfileChecker, _profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    """xid {gpu, code, message}: a code NVIDIA could give, the driver's words on one line."""
    check.integer(check.require(fault, "code", where), f"{where}.code", 1, 65535)
    message = fault.setdefault("message", f"Xid {fault['code']} event")
    if not isinstance(message, str) or not message.strip() or "\n" in message:
        check.fail(
            f"{where}.message",
            f"{message!r} is not one line of text",
            "give the driver's words for the event on one line, or leave it out",
        )


def _check_nvlink_errors_fault(
    check: ProfileChecker, profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    """nvlink_errors {gpu, counter, per_minute, count}: a GPU with NVLinks; the counter by
    name; how fast it rises from the boot (or the incident) on, and where it starts."""
    if not profile["gpus"][fault["gpu"]]["nvlinks"]:
        check.fail(
            f"{where}.gpu",
            f"gpus[{fault['gpu']}] has no NVLinks, so it has no NVLink error counters",
            "give the fault to a GPU with nvlinks",
        )
    check.choice(
        check.require(fault, "counter", where), f"{where}.counter", tuple(NVLINK_ERROR_COUNTERS)
    )
    check.integer(check.require(fault, "per_minute", where), f"{where}.per_minute", 1, 1 << 20)
    check.integer(fault.setdefault("count", 0), f"{where}.count", 0, 1 << 40)


def has_nvswitch(profile: dict[str, Any]) -> bool:
    """Whether some GPU of the profile is linked to NVSwitches (the fabric manager's)."""
    return any(link["to"] == "nvswitch" for gpu in profile["gpus"] for link in gpu["nvlinks"])


def _check_fabric_manager_fault(
    check: ProfileChecker, profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    """fabric_manager_down and fabric_manager_version {version}: NVSwitch profiles only
    (the fabric manager is installed there); the version another than the driver's."""
    if not has_nvswitch(profile):
        check.fail(
            f"{where}.kind",
            f"{fault['kind']} on a profile without NVSwitches (no GPU has nvlinks to "
            "nvswitch), where no fabric manager runs",
            "give the fault to an NVSwitch profile (h100-sxm-nvswitch)",
        )
    if fault["kind"] == "fabric_manager_version":
        version = check.require(fault, "version", where)
        driver_version = profile["driver"]["version"]
        if not isinstance(version, str) or not re.fullmatch(r"\d+(?:\.\d+)+", version):
            check.fail(
                f"{where}.version",
                f"{version!r} is not a driver version",
                'write the fabric manager\'s version in quotes, e.g. "550.90.07"',
            )
        if version == driver_version:
            check.fail(
                f"{where}.version",
                f"{version} is the driver's own version ({driver_version})",
                "give the fabric manager another version, or leave the fault out",
            )


# NVML's clock event reason bits (nvmlClocksEventReason*) by the names a clock_throttle
# fault gives; a bit NVML may add later is given as a number (e.g. 0x400).
CLOCK_EVENT_REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}
# nvmlDeviceGpuRecoveryAction_t by the names a recovery_action fault gives; a value NVML may
# add later is given as a number.
RECOVERY_ACTION_VALUES = {
    "none": 0,
    "gpu_reset": 1,
    "node_reboot": 2,
    "drain_p2p": 3,
    "drain_and_reset": 4,
    "recover_imex_domain": 5,
    "bus_reset": 6,
    "system_reboot": 7,
}


def clock_event_bit(reason: Any) -> int | None:
    """The bit a clock_throttle reason names: a known name, or one bit as a number."""
    if isinstance(reason, str):
        return CLOCK_EVENT_REASON_BITS.get(reason)
    if isinstance(reason, int) and not isinstance(reason, bool) and 0 < reason < 1 << 64:
        return reason if reason & (reason - 1) == 0 else None
    return None


def recovery_action_value(action: Any) -> int | None:
    """The value a recovery_action fault's action names: a known name, or a number."""
    if isinstance(action, str):
        return RECOVERY_ACTION_VALUES.get(action)
    if isinstance(action, int) and not isinstance(action, bool) and 0 <= action < 1 << 32:
        return action
    return None


def _check_clock_or_recovery_fault(
    check: ProfileChecker, profile: dict[str, Any], fault: dict[str, Any], where: str
) -> None:
    """clock_throttle: reasons (names or bits), every (set in every Nth reading, default 1);
    recovery_action: action (a name or a number), at most one per GPU."""
    if fault["kind"] == "clock_throttle":
        reasons = check.require(fault, "reasons", where)
        if not isinstance(reasons, list) or not reasons:
            check.fail(
                f"{where}.reasons",
                f"{reasons!r} is not a list of clock event reasons",
                f"list one or more of {', '.join(CLOCK_EVENT_REASON_BITS)}",
            )
        for position, reason in enumerate(reasons):
            if clock_event_bit(reason) is None:
                check.fail(
                    f"{where}.reasons[{position}]",
                    f"{reason!r} is not a clock event reason",
                    f"use one of {', '.join(CLOCK_EVENT_REASON_BITS)}, or a single bit as a "
                    "number (0x400) for a reason NVML may add",
                )
        check.integer(fault.setdefault("every", 1), f"{where}.every", 1, 1000)
        return
    action = check.require(fault, "action", where)
    if recovery_action_value(action) is None:
        check.fail(
            f"{where}.action",
            f"{action!r} is not a GPU recovery action",
            f"use one of {', '.join(RECOVERY_ACTION_VALUES)}, or a number from 0 to 4294967295 "
            "for a value NVML may add",
        )
    same_gpu = [
        other
        for other in profile["faults"]
        if other.get("kind") == "recovery_action" and other.get("gpu") == fault["gpu"]
    ]
    if len(same_gpu) > 1:
        check.fail(
            where,
            f"gpus[{fault['gpu']}] has {len(same_gpu)} recovery_action faults",
            "keep one: the driver gives one recovery action per GPU",
        )


def _check_boot(check: ProfileChecker, profile: dict[str, Any]) -> None:
    boot = profile.setdefault("boot", {})
    boot.setdefault("grub_cmdline_linux_default", "quiet")
    boot.setdefault("grub_cmdline_linux", "")
    boot.setdefault("iommu_default", "passthrough")
    distributions = DISTRIBUTIONS[profile["os_family"]]
    distribution = boot.setdefault("distribution", distributions[0])
    if distribution not in distributions or isinstance(distribution, bool):
        check.fail(
            "boot.distribution",
            f"{distribution!r} is not a distribution of os_family {profile['os_family']}",
            f"write one of {', '.join(distributions)}, or change os_family",
        )
    boot.setdefault("kernel_version", DEFAULT_KERNEL_VERSION[distribution])
    boot.setdefault("root_uuid", DEFAULT_ROOT_UUID)
    check.choice(boot["iommu_default"], "boot.iommu_default", IOMMU_MODES)


def validate_profile(raw: dict[str, Any]) -> dict[str, Any]:
    """Return a defaulted copy of a schema-1 profile, or raise ValueError."""
    if not isinstance(raw, dict):
        raise ValueError(f"profile: expected a mapping, got {type(raw).__name__}")
    profile = copy.deepcopy(raw)
    check = ProfileChecker(str(profile.get("name", "<unnamed>")))
    check.string(check.require(profile, "name", ""), "name")
    if profile.get("schema") != 1:
        check.fail("schema", f"{profile.get('schema')!r} is not supported", "write schema: 1")
    check.string(check.require(profile, "summary", ""), "summary")
    profile.setdefault("os_family", "Debian")
    check.choice(profile["os_family"], "os_family", OS_FAMILIES)
    cpu = check.require(profile, "cpu", "")
    vendor = check.choice(check.require(cpu, "vendor", "cpu"), "cpu.vendor", CPU_VENDORS)
    check.string(check.require(cpu, "model", "cpu"), "cpu.model")
    _check_numa_nodes(check, profile)
    _check_boot(check, profile)
    driver = profile.setdefault("driver", {})
    for key, value in DEFAULT_DRIVER.items():
        driver.setdefault(key, value)
    for key in ("gpu_init_ms", "context_create_ms", "peer_mapping_ms"):
        check.integer(driver[key], f"driver.{key}", 0, 60_000)
    _check_ports(check, profile, vendor)
    ports = {port["bdf"]: port for port in profile["pcie_ports"]}
    known = {bridge["id"] for bridge in profile["host_bridges"]} | set(ports)
    gpus = check.require(profile, "gpus", "")
    if not isinstance(gpus, list) or not gpus:
        check.fail("gpus", "empty", "list at least one GPU")
    uuids: set[str] = set()
    for index, gpu in enumerate(gpus):
        _check_gpu(check, gpu, f"gpus[{index}]", known, ports)
        if gpu["uuid"].lower() in uuids:
            check.fail(f"gpus[{index}].uuid", f"duplicate uuid {gpu['uuid']}", "make it unique")
        uuids.add(gpu["uuid"].lower())
        if gpu["parent"] not in ports:
            check.fail(f"gpus[{index}].parent", "a GPU must hang from a port", "name a port's bdf")
        known.add(gpu["bdf"])
    bdfs = [gpu["bdf"] for gpu in gpus]
    if bdfs != sorted(bdfs):
        check.fail("gpus", "not in PCI bus order", "list GPUs sorted by bdf (NVML index order)")
    _check_nvlinks(check, gpus)
    _check_paths(check, profile)
    _check_faults(check, profile)
    persistenced = profile.setdefault("persistenced", {})
    persistenced.setdefault("args", "")
    return profile


def load_profile_json(path: str | Path) -> dict[str, Any]:
    """Read and validate the node's /opt/lingbot-lab/profile.json."""
    with open(path, encoding="utf-8") as handle:
        return validate_profile(json.load(handle))


# Each fault kind's own checks, beyond the GPU it names (GPU_FAULT_KINDS).
FAULT_CHECKS = {
    "device_fails_after_copies": _check_count("copies"),
    "driver_library_mismatch": _check_library_mismatch_fault,
    "ecc_uncorrected": _check_count("count"),
    "pages_retired": _check_pages_retired_fault,
    "xid": _check_xid_fault,
    "clock_throttle": _check_clock_or_recovery_fault,
    "recovery_action": _check_clock_or_recovery_fault,
    "fabric_manager_down": _check_fabric_manager_fault,
    "fabric_manager_version": _check_fabric_manager_fault,
    "nvlink_errors": _check_nvlink_errors_fault,
    "nvlink_down": _check_nvlink_down_fault,
}
