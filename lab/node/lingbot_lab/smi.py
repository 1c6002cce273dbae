"""nvidia-smi for the lab: the 550-series output formats, answered from state.json.

Everything comes from $LINGBOT_LAB_ROOT/run/lingbot-lab/state.json plus the live files
persistence/<i> and busy/<i> (see lab/CONTRACT.md). The format_* helpers are pure: they
take the state and the live view of each GPU and return the text the real tool prints.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lingbot_lab import persistence
from lingbot_lab.profile import DEFAULT_LINK_RAMP_MS

# nvidia-smi return values (man nvidia-smi).
EXIT_OK = 0
EXIT_INVALID_ARGUMENT = 2
EXIT_NO_PERMISSION = 4
EXIT_QUERY_FAILED = 6
EXIT_DRIVER_NOT_LOADED = 9
EXIT_GPU_LOST = 15
EXIT_LIB_RM_VERSION_MISMATCH = 18

INVALID_ARGUMENTS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"
DRIVER_NOT_LOADED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
NO_DEVICES = "No devices were found\n"

IDLE_PSTATE = "P8"
LOAD_PSTATE = "P0"
MIB = 1024 * 1024
MEMORY_USED_MIB = 1
TABLE_WIDTH = 91

MIG_CAPABLE_MODELS = ("A100", "A30", "H100", "H200", "H800", "H20", "B200", "GB200")
POWER_LIMIT_W_BY_MODEL = (
    ("H100 80GB HBM3", 700),
    ("H200", 700),
    ("A100-SXM", 400),
    ("A100", 300),
    ("H100 PCIe", 350),
    ("H100", 350),
    ("L40", 350),
    ("A6000", 300),
    ("RTX 4090", 450),
    ("RTX 3090", 350),
    ("A30", 165),
)
ARCHITECTURE_BY_MODEL = (
    ("H1", "Hopper"),
    ("H2", "Hopper"),
    ("H8", "Hopper"),
    ("B2", "Blackwell"),
    ("L4", "Ada Lovelace"),
    ("Ada", "Ada Lovelace"),
    ("RTX 40", "Ada Lovelace"),
    ("A", "Ampere"),
    ("RTX 30", "Ampere"),
    ("V100", "Volta"),
    ("T4", "Turing"),
)


@dataclass(frozen=True)
class GpuView:
    """One GPU as the driver sees it at this moment."""

    info: dict[str, Any]
    persistence_enabled: bool
    busy: bool
    load_s: float = 0.0  # how long the current load has lasted (seconds)

    @property
    def index(self) -> int:
        return int(self.info["index"])

    @property
    def lost(self) -> bool:
        return bool(self.info.get("lost"))

    @property
    def link(self) -> dict[str, Any]:
        return self.info["link"]

    @property
    def link_gen_current(self) -> int:
        """gen_load once the load has lasted the link's ramp time, else gen_idle."""
        ramped = self.busy and self.load_s * 1000 >= self.link.get("ramp_ms", DEFAULT_LINK_RAMP_MS)
        return int(self.link["gen_load"] if ramped else self.link["gen_idle"])

    @property
    def link_gen_host_max(self) -> int:
        return int(self.link.get("host_max_gen", self.link["max_gen"]))

    @property
    def pstate(self) -> str:
        return LOAD_PSTATE if self.busy else IDLE_PSTATE

    @property
    def memory_total_mib(self) -> int:
        return int(self.info["memory_total_bytes"]) // MIB

    @property
    def mig_capable(self) -> bool:
        return bool(self.info.get("mig_mode")) or any(
            model in self.info["name"] for model in MIG_CAPABLE_MODELS
        )

    @property
    def mig_mode(self) -> str:
        if not self.mig_capable:
            return "N/A"
        return "Enabled" if self.info.get("mig_mode") else "Disabled"

    @property
    def geforce(self) -> bool:
        return self.info.get("brand") == "GeForce"

    @property
    def workstation(self) -> bool:
        return self.info.get("brand") in ("GeForce", "NVIDIA RTX", "Quadro")


def gpu_views(state: dict[str, Any], root: Path, now_s: float) -> list[GpuView]:
    views = []
    for gpu in state["gpus"]:
        load_s = persistence.gpu_load(root, gpu["index"], now_s)
        views.append(
            GpuView(
                info=gpu,
                persistence_enabled=persistence.read_persistence(root, gpu),
                busy=load_s is not None,
                load_s=load_s or 0.0,
            )
        )
    return views


# ----------------------------------------------------------------------------- small values


def nvml_bus_id(bdf: str) -> str:
    """0000:41:00.0 -> 00000000:41:00.0, NVML's form (8-digit domain, upper-case hex)."""
    domain, rest = bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def lost_gpu_message(bdf: str) -> str:
    return f"Unable to determine the device handle for GPU{bdf.upper()}: Unknown Error\n"


def cuda_version_text(cuda_driver_version: int) -> str:
    """12040 -> 12.4 (as nvidia-smi prints CUDA_VERSION)."""
    return f"{cuda_driver_version // 1000}.{cuda_driver_version % 1000 // 10}"


def enabled_text(enabled: bool) -> str:
    return "Enabled" if enabled else "Disabled"


def power_limit_w(name: str) -> int:
    for model, limit_w in POWER_LIMIT_W_BY_MODEL:
        if model in name:
            return limit_w
    return 300


def power_draw_w(gpu: GpuView) -> int:
    limit_w = power_limit_w(gpu.info["name"])
    return limit_w * 3 // 4 if gpu.busy else limit_w * 7 // 100


def temperature_c(gpu: GpuView) -> int:
    return 52 if gpu.busy else 31


def utilization_percent(gpu: GpuView) -> int:
    return 100 if gpu.busy else 0


def fan_text(gpu: GpuView) -> str:
    if not gpu.workstation:
        return "N/A"
    return "55%" if gpu.busy else "30%"


def architecture(name: str) -> str:
    model = name.removeprefix("NVIDIA ").removeprefix("GeForce ").removeprefix("RTX ")
    for prefix, family in ARCHITECTURE_BY_MODEL:
        if model.startswith(prefix) or (len(prefix) > 2 and prefix in name):
            return family
    return "N/A"


def ecc_errors_text(gpu: GpuView) -> str:
    if gpu.geforce:
        return "N/A"
    return "Off" if gpu.workstation else "0"


# ----------------------------------------------------------------------------- default table


def _border(*widths: int, fill: str = "-", joint: str = "+") -> str:
    return joint + joint.join(fill * width for width in widths) + joint


def _row(*cells: str) -> str:
    return "|" + "|".join(cells) + "|"


CELL_WIDTHS = (41, 24, 22)


def format_table_gpu(gpu: GpuView) -> list[str]:
    name = gpu.info["name"][:31]
    persistence_mode = "On" if gpu.persistence_enabled else "Off"
    first = (
        f"{gpu.index:>4}  {name:<31}{persistence_mode:<3} ",
        f"   {nvml_bus_id(gpu.info['bdf'])} Off ",
        f"{ecc_errors_text(gpu):>21} ",
    )
    power = f"{power_draw_w(gpu)}W / {power_limit_w(gpu.info['name']):>4}W"
    second = (
        f" {fan_text(gpu):>3}   {temperature_c(gpu):>2}C    {gpu.pstate:<2}{power:>24} ",
        f"{MEMORY_USED_MIB:>8}MiB / {gpu.memory_total_mib:>6}MiB ",
        f"{utilization_percent(gpu):>7}%{'Default':>13} ",
    )
    third = (" " * 41, " " * 24, f"{gpu.mig_mode:>21} ")
    return [_row(*first), _row(*second), _row(*third), _border(*CELL_WIDTHS)]


def format_table(state: dict[str, Any], gpus: list[GpuView], now_s: float) -> str:
    driver = state["driver"]
    version = driver["version"]
    cuda = cuda_version_text(int(driver["cuda_driver_version"]))
    inner_width = TABLE_WIDTH - 2
    lines = [
        time.ctime(now_s) + "       ",
        _border(inner_width),
        f"| NVIDIA-SMI {version:<22} Driver Version: {version:<14} CUDA Version: {cuda:<8} |",
        "|" + _border(*CELL_WIDTHS)[1:],
        _row(
            " GPU  Name                 Persistence-M ",
            " Bus-Id          Disp.A ",
            " Volatile Uncorr. ECC ",
        ),
        _row(
            " Fan  Temp   Perf          Pwr:Usage/Cap ",
            "           Memory-Usage ",
            " GPU-Util  Compute M. ",
        ),
        _row(" " * 41, " " * 24, "               MIG M. "),
        "|" + _border(*CELL_WIDTHS, fill="=")[1:-1] + "|",
    ]
    for gpu in gpus:
        if not gpu.lost:
            lines += format_table_gpu(gpu)
    lines += [
        " " * inner_width,
        _border(inner_width),
        "| Processes:".ljust(inner_width + 1) + "|",
        "|  GPU   GI   CI        PID   Type   Process name" + " " * 30 + "GPU Memory |",
        "|        ID   ID" + " " * 63 + "Usage      |",
        _border(inner_width, fill="=").replace("+", "|"),
        "|  No running processes found".ljust(inner_width + 1) + "|",
        _border(inner_width),
    ]
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- -L


def format_list(gpus: list[GpuView]) -> str:
    lines = [
        lost_gpu_message(gpu.info["bdf"]).rstrip("\n")
        if gpu.lost
        else f"GPU {gpu.index}: {gpu.info['name']} (UUID: {gpu.info['uuid']})"
        for gpu in gpus
    ]
    return "".join(line + "\n" for line in lines)


# ----------------------------------------------------------------------------- topo

UNDERLINE_ON = "\x1b[4m"
UNDERLINE_OFF = "\x1b[0m"
TOPOLOGY_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""  # noqa: E501  (the real legend's line lengths)
P2P_LEGEND = """
Legend:

  X    = Self
  OK   = Status Ok
  CNS  = Chipset not supported
  GNS  = GPU not supported
  TNS  = Topology not supported
  NS   = Not supported
  U    = Unknown
"""
P2P_KINDS = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "prop"}


def pair_index(state: dict[str, Any]) -> dict[tuple[int, int], dict[str, Any]]:
    return {(pair["a"], pair["b"]): pair for pair in state.get("pairs", [])}


def numa_affinity_text(gpu: dict[str, Any]) -> str:
    numa_node = gpu.get("numa_node")
    return "N/A" if numa_node is None or numa_node < 0 else str(numa_node)


def format_topology_matrix(state: dict[str, Any]) -> str:
    gpus = state["gpus"]
    pairs = pair_index(state)
    labels = [f"GPU{gpu['index']}" for gpu in gpus]
    header_cells = [*labels, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t" + UNDERLINE_ON + "\t".join(header_cells) + UNDERLINE_OFF]
    for gpu, label in zip(gpus, labels, strict=True):
        cells = [
            " X " if other is gpu else pairs[(gpu["index"], other["index"])]["topology"]
            for other in gpus
        ]
        affinity = [gpu.get("cpu_list") or "N/A", numa_affinity_text(gpu), "", "N/A"]
        lines.append("\t".join([label, *cells, *affinity]))
    return "\n".join(lines) + "\n" + TOPOLOGY_LEGEND


def format_p2p_matrix(state: dict[str, Any], kind_letter: str) -> str:
    kind = P2P_KINDS[kind_letter]
    gpus = state["gpus"]
    pairs = pair_index(state)
    lines = [" \t" + "".join(f"GPU{gpu['index']}\t" for gpu in gpus)]
    for gpu in gpus:
        cells = [
            "X" if other is gpu else pairs[(gpu["index"], other["index"])]["p2p_status"][kind]
            for other in gpus
        ]
        lines.append(f" GPU{gpu['index']}\t" + "".join(cell + "\t" for cell in cells))
    return "\n".join(lines) + "\n" + P2P_LEGEND


# ----------------------------------------------------------------------------- -q

KEY_WIDTH = 42


def _q_line(depth: int, key: str, value: object | None = None) -> str:
    text = "    " * depth + key
    return text if value is None else f"{text:<{KEY_WIDTH}}: {value}"


def q_pci_lines(gpu: GpuView) -> list[str]:
    info = gpu.info
    domain, bus, device_function = info["bdf"].split(":")
    device = device_function.split(".")[0]
    link = gpu.link
    return [
        _q_line(1, "PCI"),
        _q_line(2, "Bus", f"0x{bus.upper()}"),
        _q_line(2, "Device", f"0x{device.upper()}"),
        _q_line(2, "Domain", f"0x{domain.upper()}"),
        _q_line(2, "Base Classcode", "0x3"),
        _q_line(2, "Sub Classcode", "0x0" if gpu.workstation else "0x2"),
        _q_line(2, "Device Id", f"0x{int(info['pci_device_id']):08X}"),
        _q_line(2, "Bus Id", nvml_bus_id(info["bdf"])),
        _q_line(2, "Sub System Id", f"0x{int(info.get('pci_subsystem_id', 0)):08X}"),
        _q_line(2, "GPU Link Info"),
        _q_line(3, "PCIe Generation"),
        _q_line(4, "Max", link["max_gen"]),
        _q_line(4, "Current", gpu.link_gen_current),
        _q_line(4, "Device Current", gpu.link_gen_current),
        _q_line(4, "Device Max", link["max_gen_gpu"]),
        _q_line(4, "Host Max", gpu.link_gen_host_max),
        _q_line(3, "Link Width"),
        _q_line(4, "Max", f"{link['max_width']}x"),
        _q_line(4, "Current", f"{link['width']}x"),
        _q_line(2, "Bridge Chip"),
        _q_line(3, "Type", "N/A"),
        _q_line(3, "Firmware", "N/A"),
        _q_line(2, "Replays Since Reset", 0),
        _q_line(2, "Replay Number Rollovers", 0),
        _q_line(2, "Tx Throughput", "0 KB/s"),
        _q_line(2, "Rx Throughput", "0 KB/s"),
        _q_line(2, "Atomic Caps Inbound", "N/A"),
        _q_line(2, "Atomic Caps Outbound", "N/A"),
    ]


def q_memory_lines(gpu: GpuView) -> list[str]:
    total_mib = gpu.memory_total_mib
    return [
        _q_line(1, "FB Memory Usage"),
        _q_line(2, "Total", f"{total_mib} MiB"),
        _q_line(2, "Reserved", "0 MiB"),
        _q_line(2, "Used", f"{MEMORY_USED_MIB} MiB"),
        _q_line(2, "Free", f"{total_mib - MEMORY_USED_MIB} MiB"),
    ]


def q_performance_lines(gpu: GpuView) -> list[str]:
    return [
        _q_line(1, "Performance State", gpu.pstate),
        _q_line(1, "Clocks Event Reasons"),
        _q_line(2, "Idle", "Not Active" if gpu.busy else "Active"),
        _q_line(2, "Applications Clocks Setting", "Not Active"),
        _q_line(2, "SW Power Cap", "Not Active"),
        _q_line(2, "HW Slowdown", "Not Active"),
    ]


def q_compute_lines(gpu: GpuView) -> list[str]:
    return [_q_line(1, "Compute Mode", "Default")]


def q_identity_lines(gpu: GpuView) -> list[str]:
    info = gpu.info
    return [
        _q_line(1, "Product Name", info["name"]),
        _q_line(1, "Product Brand", info.get("brand", "NVIDIA")),
        _q_line(1, "Product Architecture", architecture(info["name"])),
        _q_line(1, "Display Mode", "Disabled"),
        _q_line(1, "Display Active", "Disabled"),
        _q_line(1, "Persistence Mode", enabled_text(gpu.persistence_enabled)),
        _q_line(1, "Addressing Mode", "None"),
        _q_line(1, "MIG Mode"),
        _q_line(2, "Current", gpu.mig_mode),
        _q_line(2, "Pending", gpu.mig_mode),
        _q_line(1, "Accounting Mode", "Disabled"),
        _q_line(1, "Accounting Mode Buffer Size", 4000),
        _q_line(1, "Driver Model"),
        _q_line(2, "Current", "N/A"),
        _q_line(2, "Pending", "N/A"),
        _q_line(1, "Serial Number", info.get("serial") or "N/A"),
        _q_line(1, "GPU UUID", info["uuid"]),
        _q_line(1, "Minor Number", gpu.index),
        _q_line(1, "MultiGPU Board", "No"),
        _q_line(1, "Board ID", f"0x{int(info['bdf'].split(':')[1], 16) << 8:x}"),
        _q_line(1, "GPU Reset Status"),
        _q_line(2, "Reset Required", "No"),
        _q_line(2, "Drain and Reset Recommended", "N/A"),
    ]


def q_full_lines(gpu: GpuView) -> list[str]:
    fan = fan_text(gpu)
    return [
        *q_identity_lines(gpu),
        *q_pci_lines(gpu),
        _q_line(1, "Fan Speed", f"{fan[:-1]} %" if fan.endswith("%") else fan),
        *q_performance_lines(gpu),
        *q_memory_lines(gpu),
        *q_compute_lines(gpu),
        _q_line(1, "Utilization"),
        _q_line(2, "Gpu", f"{utilization_percent(gpu)} %"),
        _q_line(2, "Memory", "0 %"),
        _q_line(1, "Temperature"),
        _q_line(2, "GPU Current Temp", f"{temperature_c(gpu)} C"),
        _q_line(1, "GPU Power Readings"),
        _q_line(2, "Power Draw", f"{power_draw_w(gpu):.2f} W"),
        _q_line(2, "Current Power Limit", f"{power_limit_w(gpu.info['name']):.2f} W"),
        _q_line(1, "Processes", "None"),
    ]


Q_DISPLAY_SECTIONS: dict[str, Callable[[GpuView], list[str]]] = {
    "MEMORY": q_memory_lines,
    "PERFORMANCE": q_performance_lines,
    "COMPUTE": q_compute_lines,
    "PCIE": q_pci_lines,
}


def format_query(
    state: dict[str, Any],
    gpus: list[GpuView],
    now_s: float,
    sections: list[str] | None = None,
) -> str:
    """nvidia-smi -q [-d SECTION,...] for the given GPUs (lost ones are skipped)."""
    driver = state["driver"]
    lines = [
        "",
        "==============NVSMI LOG==============",
        "",
        _q_line(0, "Timestamp", time.ctime(now_s)),
        _q_line(0, "Driver Version", driver["version"]),
        _q_line(0, "CUDA Version", cuda_version_text(int(driver["cuda_driver_version"]))),
        "",
        _q_line(0, "Attached GPUs", len(state["gpus"])),
    ]
    for gpu in gpus:
        if gpu.lost:
            continue
        lines.append(f"GPU {nvml_bus_id(gpu.info['bdf'])}")
        if sections:
            for section in sections:
                lines += Q_DISPLAY_SECTIONS[section](gpu)
        else:
            lines += q_full_lines(gpu)
        lines.append("")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- --query-gpu


@dataclass(frozen=True)
class QueryField:
    value: Callable[[GpuView, dict[str, Any], float], str]
    unit: str = ""


def _link(key: str) -> Callable[[GpuView, dict[str, Any], float], str]:
    return lambda gpu, _state, _now: str(gpu.link[key])


def _info(key: str) -> Callable[[GpuView, dict[str, Any], float], str]:
    return lambda gpu, _state, _now: str(gpu.info.get(key) or "[N/A]")


def _timestamp(now_s: float) -> str:
    milliseconds = int(now_s * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now_s)) + f".{milliseconds:03d}"


def _bdf_part(position: int) -> Callable[[GpuView, dict[str, Any], float], str]:
    def value(gpu: GpuView, _state: dict[str, Any], _now: float) -> str:
        domain, bus, device_function = gpu.info["bdf"].split(":")
        parts = (domain, bus, device_function.split(".")[0])
        return f"0x{parts[position].upper()}"

    return value


QUERY_FIELDS: dict[str, QueryField] = {
    "timestamp": QueryField(lambda _g, _s, now: _timestamp(now)),
    "driver_version": QueryField(lambda _g, state, _n: state["driver"]["version"]),
    "count": QueryField(lambda _g, state, _n: str(len(state["gpus"]))),
    "index": QueryField(lambda gpu, _s, _n: str(gpu.index)),
    "name": QueryField(_info("name")),
    "serial": QueryField(_info("serial")),
    "uuid": QueryField(_info("uuid")),
    "pci.bus_id": QueryField(lambda gpu, _s, _n: nvml_bus_id(gpu.info["bdf"])),
    "pci.domain": QueryField(_bdf_part(0)),
    "pci.bus": QueryField(_bdf_part(1)),
    "pci.device": QueryField(_bdf_part(2)),
    "pci.device_id": QueryField(lambda gpu, _s, _n: f"0x{int(gpu.info['pci_device_id']):08X}"),
    "pci.sub_device_id": QueryField(
        lambda gpu, _s, _n: f"0x{int(gpu.info.get('pci_subsystem_id', 0)):08X}"
    ),
    "persistence_mode": QueryField(lambda gpu, _s, _n: enabled_text(gpu.persistence_enabled)),
    "pstate": QueryField(lambda gpu, _s, _n: gpu.pstate),
    "pcie.link.gen.current": QueryField(lambda gpu, _s, _n: str(gpu.link_gen_current)),
    "pcie.link.gen.gpucurrent": QueryField(lambda gpu, _s, _n: str(gpu.link_gen_current)),
    "pcie.link.gen.max": QueryField(_link("max_gen")),
    "pcie.link.gen.gpumax": QueryField(_link("max_gen_gpu")),
    "pcie.link.gen.hostmax": QueryField(lambda gpu, _s, _n: str(gpu.link_gen_host_max)),
    "pcie.link.width.current": QueryField(_link("width")),
    "pcie.link.width.max": QueryField(_link("max_width")),
    "memory.total": QueryField(lambda gpu, _s, _n: str(gpu.memory_total_mib), "MiB"),
    "memory.reserved": QueryField(lambda _g, _s, _n: "0", "MiB"),
    "memory.used": QueryField(lambda _g, _s, _n: str(MEMORY_USED_MIB), "MiB"),
    "memory.free": QueryField(
        lambda gpu, _s, _n: str(gpu.memory_total_mib - MEMORY_USED_MIB), "MiB"
    ),
    "mig.mode.current": QueryField(
        lambda gpu, _s, _n: "[N/A]" if gpu.mig_mode == "N/A" else gpu.mig_mode
    ),
    "mig.mode.pending": QueryField(
        lambda gpu, _s, _n: "[N/A]" if gpu.mig_mode == "N/A" else gpu.mig_mode
    ),
    "compute_mode": QueryField(lambda _g, _s, _n: "Default"),
    "display_mode": QueryField(lambda _g, _s, _n: "Disabled"),
    "display_active": QueryField(lambda _g, _s, _n: "Disabled"),
    "utilization.gpu": QueryField(lambda gpu, _s, _n: str(utilization_percent(gpu)), "%"),
    "temperature.gpu": QueryField(lambda gpu, _s, _n: str(temperature_c(gpu))),
    "power.draw": QueryField(lambda gpu, _s, _n: f"{power_draw_w(gpu):.2f}", "W"),
    "power.limit": QueryField(lambda gpu, _s, _n: f"{power_limit_w(gpu.info['name']):.2f}", "W"),
}
QUERY_FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
}


class QueryFieldError(ValueError):
    """An unknown --query-gpu field; str() is the real tool's message."""

    def __init__(self, field_name: str) -> None:
        super().__init__(f'Field "{field_name}" is not a valid field to query.')


def resolve_query_fields(spec: str) -> list[str]:
    names = []
    for raw_name in spec.split(","):
        name = raw_name.strip()
        canonical = QUERY_FIELD_ALIASES.get(name, name)
        if canonical not in QUERY_FIELDS:
            raise QueryFieldError(name)
        names.append(name)
    return names


def _canonical(name: str) -> str:
    return QUERY_FIELD_ALIASES.get(name, name)


def query_field_header(name: str, units: bool = True) -> str:
    unit = QUERY_FIELDS[_canonical(name)].unit
    return f"{name} [{unit}]" if unit and units else name


def query_field_value(
    name: str, gpu: GpuView, state: dict[str, Any], now_s: float, units: bool = True
) -> str:
    field = QUERY_FIELDS[_canonical(name)]
    value = field.value(gpu, state, now_s)
    if field.unit and units and not value.startswith("["):
        return f"{value} {field.unit}"
    return value


def format_query_gpu(
    state: dict[str, Any],
    gpus: list[GpuView],
    names: list[str],
    now_s: float,
    *,
    header: bool = True,
    units: bool = True,
) -> str:
    """--query-gpu=<names> --format=csv[,noheader][,nounits]; lost GPUs print the error."""
    lines = [", ".join(query_field_header(name) for name in names)] if header else []
    for gpu in gpus:
        if gpu.lost:
            lines.append(lost_gpu_message(gpu.info["bdf"]).rstrip("\n"))
            continue
        lines.append(", ".join(query_field_value(name, gpu, state, now_s, units) for name in names))
    return "".join(line + "\n" for line in lines)


# ----------------------------------------------------------------------------- -pm


def set_persistence_mode(
    root: Path,
    gpus: list[GpuView],
    enable: bool,
    *,
    is_root: bool,
    daemon_running: bool,
) -> tuple[str, int]:
    """nvidia-smi -pm 0|1 on the given GPUs: (output, exit code). Without the daemon the
    driver keeps the mode itself, which nvidia-smi calls Legacy persistence mode."""
    lines: list[str] = []
    mode_word = "persistence mode" if daemon_running else "Legacy persistence mode"
    for gpu in gpus:
        bus_id = nvml_bus_id(gpu.info["bdf"])
        if gpu.lost:
            lines.append(lost_gpu_message(gpu.info["bdf"]).rstrip("\n"))
            return "".join(line + "\n" for line in lines), EXIT_GPU_LOST
        if not is_root:
            lines.append(
                f"Unable to set persistence mode for GPU {bus_id}: Insufficient Permissions"
            )
            lines.append("Terminating early due to previous errors.")
            return "".join(line + "\n" for line in lines), EXIT_NO_PERMISSION
        if gpu.persistence_enabled == enable:
            lines.append(f"Persistence mode is already {enabled_text(enable)} for GPU {bus_id}.")
            continue
        persistence.write_persistence(root, gpu.index, enable)
        lines.append(f"{'Enabled' if enable else 'Disabled'} {mode_word} for GPU {bus_id}.")
    lines.append("All done.")
    return "".join(line + "\n" for line in lines), EXIT_OK


# ----------------------------------------------------------------------------- command line


class ArgumentError(Exception):
    """A command line nvidia-smi rejects; the message is what it prints."""

    def __init__(self, message: str = INVALID_ARGUMENTS, code: int = EXIT_INVALID_ARGUMENT):
        super().__init__(message)
        self.message = message
        self.code = code


@dataclass
class Command:
    action: str = "table"
    ids: list[str] | None = None
    query_fields: str | None = None
    format_options: list[str] | None = None
    displays: list[str] | None = None
    persistence_value: str | None = None
    p2p_kind: str | None = None


LONG_OPTIONS_WITH_VALUE = {
    "--id": "-i",
    "--query-gpu": "--query-gpu",
    "--format": "--format",
    "--display": "-d",
    "--persistence-mode": "-pm",
}


def _split_options(argv: list[str]) -> list[tuple[str, str | None]]:
    """Options as (name, value); values joined by '=' or given as the next word."""
    takes_value = {"-i", "-d", "-pm", "--query-gpu", "--format", "-p2p"}
    options: list[tuple[str, str | None]] = []
    arguments = list(argv)
    while arguments:
        argument = arguments.pop(0)
        name, has_value, value = argument.partition("=")
        name = LONG_OPTIONS_WITH_VALUE.get(name, name)
        if name in takes_value:
            if not has_value:
                if not arguments:
                    raise ArgumentError()
                value = arguments.pop(0)
            options.append((name, value))
        else:
            options.append((argument, None))
    return options


def parse_command(argv: list[str]) -> Command:
    command = Command()
    if argv[:1] == ["topo"]:
        return _parse_topo(argv[1:])
    for name, value in _split_options(argv):
        if name in ("-L", "--list-gpus"):
            command.action = "list"
        elif name in ("-q", "--query"):
            command.action = "query"
        elif name == "-i" and value is not None:
            command.ids = [part.strip() for part in value.split(",")]
        elif name == "-d" and value is not None:
            command.displays = [part.strip().upper() for part in value.split(",")]
        elif name == "--query-gpu":
            command.action = "query-gpu"
            command.query_fields = value
        elif name == "--format" and value is not None:
            command.format_options = [part.strip() for part in value.split(",")]
        elif name == "-pm":
            command.action = "persistence"
            command.persistence_value = value
        else:
            raise ArgumentError()
    _refuse_mismatched_options(command)
    return command


def _refuse_mismatched_options(command: Command) -> None:
    """ArgumentError for options that nvidia-smi refuses together or with that value."""
    if command.displays and (
        command.action != "query"
        or any(display not in Q_DISPLAY_SECTIONS for display in command.displays)
    ):
        raise ArgumentError()
    if command.action == "query-gpu" and (
        not command.format_options or command.format_options[0] != "csv"
    ):
        raise ArgumentError()
    if command.action == "persistence" and command.persistence_value not in ("0", "1"):
        raise ArgumentError()


def _parse_topo(argv: list[str]) -> Command:
    options = _split_options(argv)
    if options in ([("-m", None)], [("--matrix", None)]):
        return Command(action="topo-matrix")
    if len(options) == 1 and options[0][0] == "-p2p" and options[0][1] in P2P_KINDS:
        return Command(action="topo-p2p", p2p_kind=options[0][1])
    raise ArgumentError()


def select_gpus(gpus: list[GpuView], ids: list[str] | None) -> list[GpuView]:
    """-i accepts indices, PCI bus ids (any domain width) and UUIDs."""
    if ids is None:
        return gpus
    selected = []
    for wanted in ids:
        matches = [gpu for gpu in gpus if _matches(gpu, wanted)]
        if not matches:
            raise ArgumentError(NO_DEVICES, EXIT_QUERY_FAILED)
        selected += matches
    return selected


def _matches(gpu: GpuView, wanted: str) -> bool:
    if wanted.isdigit():
        return int(wanted) == gpu.index
    if wanted.upper().startswith("GPU-"):
        return wanted.lower() == gpu.info["uuid"].lower()
    try:
        return nvml_bus_id(wanted) == nvml_bus_id(gpu.info["bdf"])
    except ValueError:
        return False


def _lost_report(gpus: list[GpuView]) -> tuple[str, int]:
    lost = [gpu for gpu in gpus if gpu.lost]
    text = "".join(lost_gpu_message(gpu.info["bdf"]) for gpu in lost)
    return text, EXIT_GPU_LOST if lost else EXIT_OK


def run_command(  # noqa: PLR0911 - one return per nvidia-smi action
    command: Command, state: dict[str, Any], root: Path, now_s: float, is_root: bool
) -> tuple[str, int]:
    """The output and exit code of one nvidia-smi invocation."""
    if command.action == "topo-matrix":
        return format_topology_matrix(state), EXIT_OK
    if command.action == "topo-p2p":
        return format_p2p_matrix(state, command.p2p_kind or "r"), EXIT_OK
    selected = select_gpus(gpu_views(state, root, now_s), command.ids)
    if command.action == "persistence":
        return set_persistence_mode(
            root,
            selected,
            command.persistence_value == "1",
            is_root=is_root,
            daemon_running=persistence.persistenced_running(root),
        )
    if command.action == "list":
        return format_list(selected), _lost_report(selected)[1]
    if command.action == "query-gpu":
        names = resolve_query_fields(command.query_fields or "")
        format_options = command.format_options or ["csv"]
        text = format_query_gpu(
            state,
            selected,
            names,
            now_s,
            header="noheader" not in format_options,
            units="nounits" not in format_options,
        )
        return text, _lost_report(selected)[1]
    lost_text, code = _lost_report(selected)
    if command.action == "query":
        return lost_text + format_query(state, selected, now_s, command.displays), code
    return lost_text + format_table(state, selected, now_s), code


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    root = persistence.lab_root()
    try:
        command = parse_command(arguments)
        state = persistence.load_state(root)
        driver = state.get("driver") or {}
        if driver.get("library_version", driver.get("version")) != driver.get("version"):
            library = ".".join(str(driver["library_version"]).split(".")[:2])
            sys.stdout.write(
                "Failed to initialize NVML: Driver/library version mismatch\n"
                f"NVML library version: {library}\n"
            )
            return EXIT_LIB_RM_VERSION_MISMATCH
        output, code = run_command(command, state, root, time.time(), os.geteuid() == 0)
    except ArgumentError as error:
        sys.stdout.write(error.message)
        return error.code
    except QueryFieldError as error:
        sys.stdout.write(f"{error}\n\n")
        return EXIT_INVALID_ARGUMENT
    except persistence.StateUnavailableError:
        sys.stdout.write(DRIVER_NOT_LOADED)
        return EXIT_DRIVER_NOT_LOADED
    sys.stdout.write(output)
    return code
