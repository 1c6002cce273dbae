"""Hardware state: profile + running kernel command line -> state (lab/CONTRACT.md "State")."""

from __future__ import annotations

from typing import Any

from lingbot_lab.fabric_manager import fabric_manager_stopped
from lingbot_lab.profile import (
    DEFAULT_LINK_RAMP_MS,
    NVIDIA_VENDOR_ID,
    NVLINK_ERROR_COUNTERS,
    acs_redirect_ports,
    ancestors,
    clock_event_bit,
    format_cpulist,
    parse_cpulist,
    recovery_action_value,
)

STATE_SCHEMA = 1
TOPOLOGY_LEVELS = {"PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50}
SWITCH_KINDS = ("switch_upstream", "switch_downstream", "chipset_port")
ISOLATING_ACS_FLAGS = ("source_validation", "request_redirect", "completion_redirect")
# Where the node's PCI functions are (each <bdf>/config is the function's config space).
SYSFS_PCI_DEVICES = "/sys/bus/pci/devices"
IOMMU_GROUP_TYPES = {"passthrough": "identity", "translated": "DMA-FQ"}
# Bytes per lane and transfer, relative: transfers per second (GT/s) times the line code
# (8b/10b up to Gen2, 128b/130b from Gen3).
LANE_RATE_BY_GEN = {1: 2.5 * 8 / 10, 2: 5.0 * 8 / 10, 3: 8.0 * 128 / 130}
LANE_RATE_BY_GEN |= {4: 16.0 * 128 / 130, 5: 32.0 * 128 / 130}


def tokenize_cmdline(cmdline: str) -> list[str]:
    """Split a kernel command line like the kernel does: spaces outside double quotes."""
    tokens: list[str] = []
    current: list[str] = []
    in_quotes = False
    for char in cmdline:
        if char == '"':
            in_quotes = not in_quotes
            current.append(char)
        elif char.isspace() and not in_quotes:
            if current:
                tokens.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        tokens.append("".join(current))
    return tokens


def cmdline_params(cmdline: str) -> list[tuple[str, str | None]]:
    """Tokens as (key, value) pairs; value None for bare flags, quotes removed from values."""
    params: list[tuple[str, str | None]] = []
    for token in tokenize_cmdline(cmdline):
        key, equals, value = token.partition("=")
        params.append((key, value.replace('"', "") if equals else None))
    return params


def has_pci_noacpi(cmdline: str) -> bool:
    return any(
        key == "pci" and value is not None and "noacpi" in value.split(",")
        for key, value in cmdline_params(cmdline)
    )


def iommu_mode(cmdline: str, cpu_vendor: str, iommu_default: str) -> str:
    """off | translated | passthrough, following the CONTRACT.md rules in order."""
    params = set(cmdline_params(cmdline))
    if ("iommu", "pt") in params or ("iommu.passthrough", "1") in params:
        return "passthrough"
    vendor_param = "intel_iommu" if cpu_vendor == "Intel" else "amd_iommu"
    if ("iommu", "off") in params or (vendor_param, "off") in params:
        return "off"
    if (vendor_param, "on") in params:
        return "translated"
    return iommu_default


def host_bridge_numa(profile: dict[str, Any], host_bridge_id: str) -> int:
    return next(b["numa_node"] for b in profile["host_bridges"] if b["id"] == host_bridge_id)


def pcie_topology(profile: dict[str, Any], bdf_a: str, bdf_b: str) -> str:
    """PIX | PXB | PHB | NODE | SYS from the PCIe tree."""
    chain_a = ancestors(profile, bdf_a)
    chain_b = ancestors(profile, bdf_b)
    if chain_a[-1] != chain_b[-1]:
        same_node = host_bridge_numa(profile, chain_a[-1]) == host_bridge_numa(profile, chain_b[-1])
        return "NODE" if same_node else "SYS"
    common = next(bridge for bridge in chain_a if bridge in chain_b)
    kinds = {port["bdf"]: port["kind"] for port in profile["pcie_ports"]}
    if kinds.get(common) not in SWITCH_KINDS:
        return "PHB"
    below_a = chain_a.index(common)
    below_b = chain_b.index(common)
    return "PIX" if max(below_a, below_b) <= 1 else "PXB"


def inactive_nvlinks(profile: dict[str, Any], index: int) -> int:
    """How many of the GPU's NVLinks did not train (fault nvlink_down): its last ones."""
    return sum(
        fault["links"]
        for fault in profile["faults"]
        if fault["kind"] == "nvlink_down" and fault["gpu"] == index
    )


def active_nvlinks(profile: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The GPU's NVLink groups as trained: the inactive links taken from the last groups."""
    inactive = inactive_nvlinks(profile, index)
    groups = []
    for link in reversed(profile["gpus"][index]["nvlinks"]):
        down = min(inactive, link["count"])
        inactive -= down
        groups.append({**link, "count": link["count"] - down})
    return list(reversed(groups))


# NVML's nvmlGpuFabricState_t.
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_COMPLETED = 0, 1, 3


def fabric_state(profile: dict[str, Any], index: int) -> int:
    """A GPU linked to NVSwitches joins the NVLink fabric once the fabric manager has set it
    up (completed); with the fabric manager down, or refusing to start at another version
    than the driver's, it never starts. Others have no fabric."""
    if not any(link["to"] == "nvswitch" for link in profile["gpus"][index]["nvlinks"]):
        return FABRIC_NOT_SUPPORTED
    if fabric_manager_stopped(profile):
        return FABRIC_NOT_STARTED
    return FABRIC_COMPLETED


def memory_health(profile: dict[str, Any], index: int) -> dict[str, int]:
    """What the GPU's memory reports through NVML (faults row_remap_pending,
    row_remap_failed, ecc_uncorrected, pages_retired): a row remapped for an uncorrectable
    error is pending until the GPU is reset; a remap that found no spare row failed. Page
    retirement (before Ampere) is answered only for a GPU with the fault pages_retired."""
    kinds = {
        fault["kind"]: fault
        for fault in profile["faults"]
        if fault.get("gpu") == index
        and fault["kind"]
        in ("row_remap_pending", "row_remap_failed", "ecc_uncorrected", "pages_retired")
    }
    retired = kinds.get("pages_retired")
    remapped = "row_remap_pending" in kinds or "row_remap_failed" in kinds
    uncorrected = kinds["ecc_uncorrected"]["count"] if "ecc_uncorrected" in kinds else 0
    return {
        "ecc_uncorrected": max(uncorrected, 1 if remapped else 0),
        "rows_remapped_uncorrectable": 1 if remapped else 0,
        "remap_pending": 1 if "row_remap_pending" in kinds else 0,
        "remap_failed": 1 if "row_remap_failed" in kinds else 0,
        "page_retirement": 1 if retired else 0,
        "pages_retired_single_bit": retired["single_bit"] if retired else 0,
        "pages_retired_double_bit": retired["double_bit"] if retired else 0,
        "pages_retirement_pending": 1 if retired and retired["pending"] else 0,
    }


# The first driver branch whose NVML gives the GPU recovery action (NVML 12.8).
RECOVERY_ACTION_DRIVER_BRANCH = 570


def driver_branch(version: str) -> int:
    """'550.54.15' -> 550; 0 for a version that does not start with a number."""
    head = str(version).split(".")[0]
    return int(head) if head.isdigit() else 0


def clock_events(profile: dict[str, Any], index: int) -> list[dict[str, int]]:
    """The clock event reasons NVML gives the GPU beyond idle (faults clock_throttle): per
    fault its bits (mask) and the readings that have them (every Nth, counted per process
    from its nvmlInit)."""
    events = []
    for fault in profile["faults"]:
        if fault["kind"] == "clock_throttle" and fault["gpu"] == index:
            mask = 0
            for reason in fault["reasons"]:
                mask |= clock_event_bit(reason) or 0
            events.append({"mask": mask, "every": fault["every"]})
    return events


def nvlink_errors(
    profile: dict[str, Any], index: int, booted_unix_s: float
) -> list[dict[str, Any]]:
    """The GPU's NVLink error counters that rise (faults nvlink_errors), NVML's counter
    number each: from ``count`` at ``since_unix_s`` (an incident's; else the boot's) on,
    ``per_minute`` more each minute, all on the GPU's first NVLink."""
    return [
        {
            "counter": NVLINK_ERROR_COUNTERS[fault["counter"]],
            "count": fault["count"],
            "per_minute": fault["per_minute"],
            "since_unix_s": round(fault.get("since_unix_s", booted_unix_s), 3),
        }
        for fault in profile["faults"]
        if fault["kind"] == "nvlink_errors" and fault["gpu"] == index
    ]


def recovery_action(profile: dict[str, Any], index: int) -> int | None:
    """NVML's GPU recovery action: the fault recovery_action's; else none (0) from driver
    branch RECOVERY_ACTION_DRIVER_BRANCH on, and not supported (None) before it."""
    for fault in profile["faults"]:
        if fault["kind"] == "recovery_action" and fault["gpu"] == index:
            return recovery_action_value(fault["action"])
    supported = driver_branch(profile["driver"]["version"]) >= RECOVERY_ACTION_DRIVER_BRANCH
    return 0 if supported else None


def nvlink_count(profile: dict[str, Any], index_a: int, index_b: int) -> int:
    """Active direct links between the two, or through a shared NVSwitch the smaller
    active link count."""
    links_a = active_nvlinks(profile, index_a)
    links_b = active_nvlinks(profile, index_b)
    direct = sum(link["count"] for link in links_a if link["to"] == index_b)
    direct = max(direct, sum(link["count"] for link in links_b if link["to"] == index_a))
    switch_a = sum(link["count"] for link in links_a if link["to"] == "nvswitch")
    switch_b = sum(link["count"] for link in links_b if link["to"] == "nvswitch")
    return direct + min(switch_a, switch_b)


def isolated_by_acs(port: dict[str, Any]) -> bool:
    return all(port["acs"][flag] for flag in ISOLATING_ACS_FLAGS)


def iommu_groups(profile: dict[str, Any], mode: str) -> dict[str, int]:
    """IOMMU group number per port and GPU bdf; empty with the IOMMU off.

    Ports get their own group. Below a switch or chipset, the highest downstream port that
    does not isolate (ACS source validation + request and completion redirect) puts every
    device below its upstream port's bus in one group. Numbers follow bus order from 0.
    """
    if mode == "off":
        return {}
    ports = {port["bdf"]: port for port in profile["pcie_ports"]}
    devices = sorted([*ports, *(gpu["bdf"] for gpu in profile["gpus"])])
    keys: dict[str, str] = {}
    for bdf in devices:
        key = bdf
        for bridge in [bdf, *ancestors(profile, bdf)]:
            port = ports.get(bridge)
            if (
                port is not None
                and bridge != bdf
                and port["kind"] not in ("root_port", "switch_upstream")
                and not isolated_by_acs(port)
            ):
                key = f"below {port['parent']}"
        keys[bdf] = key
    numbers: dict[str, int] = {}
    groups: dict[str, int] = {}
    for bdf in devices:
        groups[bdf] = numbers.setdefault(keys[bdf], len(numbers))
    return groups


def _p2p_status(
    pair_lost: bool, noacpi: bool, geforce: bool, supported: bool, nvlinks: int
) -> dict[str, str]:
    link_word = "OK" if nvlinks else "NS"
    if pair_lost:
        return dict.fromkeys(("read", "write", "nvlink", "atomics", "prop"), "U")
    if noacpi:
        base = "CNS"
    elif geforce:
        base = "GNS"
    elif not supported:
        base = "TNS"
    else:
        return {
            "read": "OK",
            "write": "OK",
            "nvlink": link_word,
            "atomics": link_word,
            "prop": "OK",
        }
    return {"read": base, "write": base, "nvlink": link_word, "atomics": base, "prop": base}


def link_rate(gen: int, width: int) -> float:
    """A link's raw rate per direction (GB/s): the lane rate times the width, over 8."""
    return LANE_RATE_BY_GEN[gen] * width / 8


def host_path_share(profile: dict[str, Any], gpu: dict[str, Any]) -> float:
    """The share of the GPU's host figures its path lets through: the narrowest trained
    link above the GPU's own slot against the GPU's link under load, at most 1. The
    profile's host figures are those of the GPU's own link; a switch uplink trained at
    x8 behind a x16 GPU halves them."""
    ports = {port["bdf"]: port for port in profile["pcie_ports"]}
    own = link_rate(gpu["link"]["max_gen"], gpu["link"]["width"])
    above_slot = [ports[bdf] for bdf in ancestors(profile, gpu["bdf"])[1:] if bdf in ports]
    rates = [link_rate(port["link"]["gen"], port["link"]["width"]) for port in above_slot]
    return min([1.0, *(rate / own for rate in rates)])


def _host_state(profile: dict[str, Any], gpu: dict[str, Any]) -> dict[str, Any]:
    """The GPU's host figures as its path lets them through (host_path_share)."""
    share = host_path_share(profile, gpu)
    host = dict(gpu["host"])
    for key in ("h2d_gbytes_per_s", "d2h_gbytes_per_s"):
        host[key] = round(host[key] * share, 2)
    return host


def _gpu_state(
    profile: dict[str, Any],
    index: int,
    noacpi: bool,
    groups: dict[str, int],
    booted_unix_s: float,
) -> dict[str, Any]:
    gpu = profile["gpus"][index]
    nodes = profile["numa_nodes"]
    numa_node = host_bridge_numa(profile, ancestors(profile, gpu["bdf"])[-1])
    all_cpus = [cpu for node in nodes for cpu in parse_cpulist(node["cpus"])]
    faults = profile["faults"]
    link = gpu["link"]
    return {
        "index": index,
        "bdf": gpu["bdf"],
        "name": gpu["model"],
        "brand": gpu["brand"],
        "uuid": gpu["uuid"],
        "serial": gpu["serial"],
        "pci_device_id": (gpu["pci_device_id"] << 16) | NVIDIA_VENDOR_ID,
        "pci_subsystem_id": (gpu["pci_subsystem_device_id"] << 16) | NVIDIA_VENDOR_ID,
        "memory_total_bytes": gpu["memory_mib"] * 1024 * 1024,
        "numa_node": -1 if noacpi else numa_node,
        "cpu_list": format_cpulist(all_cpus) if noacpi else nodes[numa_node]["cpus"],
        "link": {
            "max_gen_gpu": link["max_gen_gpu"],
            "max_width_gpu": link["max_width_gpu"],
            "max_gen": link["max_gen"],
            "max_width": link["max_width"],
            "width": link["width"],
            "gen_load": link["max_gen"],
            "gen_idle": link["gen_idle"],
            "ramp_ms": link.get("ramp_ms", DEFAULT_LINK_RAMP_MS),
        },
        "host": _host_state(profile, gpu),
        "host_path_share": round(host_path_share(profile, gpu), 4),
        "nvlinks": [dict(nvlink) for nvlink in gpu["nvlinks"]],
        "nvlinks_inactive": inactive_nvlinks(profile, index),
        "memory": memory_health(profile, index),
        "fabric_state": fabric_state(profile, index),
        "clock_events": clock_events(profile, index),
        "recovery_action": recovery_action(profile, index),
        "nvlink_errors": nvlink_errors(profile, index, booted_unix_s),
        "mig_mode": 1 if gpu["mig"] else 0,
        "lost": any(f["kind"] == "gpu_lost" and f["gpu"] == index for f in faults),
        "fail_after_copies": next(
            (
                f["copies"]
                for f in faults
                if f["kind"] == "device_fails_after_copies" and f["gpu"] == index
            ),
            0,
        ),
        "persistence_default": gpu["persistence_default"],
        "iommu_group": groups.get(gpu["bdf"]),
    }


def _pair_state(
    profile: dict[str, Any], gpus: list[dict[str, Any]], a: int, b: int, *, noacpi: bool, mode: str
) -> dict[str, Any]:
    path = next(p for p in profile["paths"] if sorted(p["between"]) == sorted([a, b]))
    nvlinks = nvlink_count(profile, a, b)
    pcie_word = pcie_topology(profile, gpus[a]["bdf"], gpus[b]["bdf"])
    geforce = "GeForce" in (gpus[a]["brand"], gpus[b]["brand"])
    status = _p2p_status(
        gpus[a]["lost"] or gpus[b]["lost"], noacpi, geforce, path["p2p"] is not None, nvlinks
    )
    p2p = None
    without_redirect = None
    if status["read"] == "OK":
        translated = path["p2p_iommu_translated"] if mode == "translated" else None
        p2p = dict(translated or path["p2p"])
        if translated is None and path["p2p_without_acs_redirect"] is not None:
            without_redirect = dict(path["p2p_without_acs_redirect"])
    ports = acs_redirect_ports(profile, gpus[a]["bdf"], gpus[b]["bdf"])
    drop_fault = any(f["kind"] == "p2p_write_drop_when_iommu_translated" for f in profile["faults"])
    return {
        "a": a,
        "b": b,
        "topology": f"NV{nvlinks}" if nvlinks else pcie_word,
        "topology_level": TOPOLOGY_LEVELS[pcie_word],
        "nvlink_count": nvlinks,
        "p2p_status": status,
        "p2p": p2p,
        "p2p_without_acs_redirect": without_redirect,
        "acs_redirect_ports": [
            {"bdf": bdf, "config_path": f"{SYSFS_PCI_DEVICES}/{bdf}/config"} for bdf in ports
        ],
        "host_staged": dict(path["host_staged"]),
        "p2p_drops_writes": drop_fault and mode == "translated",
    }


def compute_state(
    profile: dict[str, Any], cmdline: str, booted_unix_s: float = 0.0
) -> dict[str, Any]:
    """The machine as the running kernel sees it; profile must come from validate_profile.
    ``booted_unix_s``: when the node booted (what rises with time counts from it)."""
    noacpi = has_pci_noacpi(cmdline)
    mode = iommu_mode(cmdline, profile["cpu"]["vendor"], profile["boot"]["iommu_default"])
    groups = iommu_groups(profile, mode)
    gpus = [
        _gpu_state(profile, i, noacpi, groups, booted_unix_s) for i in range(len(profile["gpus"]))
    ]
    pairs = [
        _pair_state(profile, gpus, a, b, noacpi=noacpi, mode=mode)
        for a in range(len(gpus))
        for b in range(len(gpus))
        if a != b
    ]
    driver = profile["driver"]
    cuda_major = driver["cuda_driver_version"] // 1000
    return {
        "schema": STATE_SCHEMA,
        "profile": profile["name"],
        "boot": {
            "cmdline": cmdline,
            "iommu_mode": mode,
            "acpi_pci": not noacpi,
            "booted_unix_s": round(booted_unix_s, 3),
        },
        "driver": {
            "version": driver["version"],
            # The user-space libraries' version: another one after a driver update that
            # was not followed by a reboot (fault driver_library_mismatch).
            "library_version": next(
                (
                    fault["library_version"]
                    for fault in profile["faults"]
                    if fault["kind"] == "driver_library_mismatch"
                ),
                driver["version"],
            ),
            "nvml_version": f"{cuda_major}.{driver['version']}",
            "cuda_driver_version": driver["cuda_driver_version"],
            "gpu_init_ms": driver["gpu_init_ms"],
            "context_create_ms": driver["context_create_ms"],
            "peer_mapping_ms": driver["peer_mapping_ms"],
        },
        "cpu": {"vendor": profile["cpu"]["vendor"], "model": profile["cpu"]["model"]},
        "numa_nodes": [{"id": n["id"], "cpus": n["cpus"]} for n in profile["numa_nodes"]],
        "gpus": gpus,
        "pairs": pairs,
    }


def _flat_value(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _flatten(prefix: str, value: Any, lines: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, item, lines)
    elif isinstance(value, list):
        lines.append(f"{prefix}.count {len(value)}")
        for position, item in enumerate(value):
            _flatten(f"{prefix}.{position}", item, lines)
    else:
        lines.append(f"{prefix} {_flat_value(value)}")


def flatten_state(state: dict[str, Any]) -> str:
    """state.txt: one `key value` line per leaf.

    gpus -> gpu_count + gpu.<index>.*, pairs -> pair_count + pair.<a>.<b>.*,
    numa_nodes -> numa_node_count + numa_node.<position>.*, other lists -> <key>.count +
    <key>.<position>.*; booleans 0/1, null `-`.
    """
    lines: list[str] = []
    for key, value in state.items():
        if key == "gpus":
            lines.append(f"gpu_count {len(value)}")
            for gpu in value:
                _flatten(f"gpu.{gpu['index']}", gpu, lines)
        elif key == "pairs":
            lines.append(f"pair_count {len(value)}")
            for pair in value:
                _flatten(f"pair.{pair['a']}.{pair['b']}", pair, lines)
        elif key == "numa_nodes":
            lines.append(f"numa_node_count {len(value)}")
            for position, node in enumerate(value):
                _flatten(f"numa_node.{position}", node, lines)
        else:
            _flatten(key, value, lines)
    return "\n".join(lines) + "\n"
