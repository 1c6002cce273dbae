"""``nvidia-smi -q``: driver and CUDA version, and per GPU the fields the toolkit uses.

The output is an indented tree of ``Key : Value`` lines and section titles; old
drivers indent with tabs, new ones with spaces, and field names change case between
driver generations (``Replays since reset`` / ``Replays Since Reset``), so keys are
compared case-insensitively.
"""

from __future__ import annotations

import re

from ._common import ParseError, int_or_none, require_text

KIND = "smi-q"
EXPECTED = "the output of `nvidia-smi -q`"

_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
_FIELD_RE = re.compile(r"^(.*?\S)\s*:\s?(.*)$")

Node = dict[str, "Node | str"]


def _indent(line: str) -> int:
    expanded = line.expandtabs(4)
    return len(expanded) - len(expanded.lstrip())


def _tree(lines: list[str]) -> Node:
    """The indented lines as nested dicts; keys lower-cased, first occurrence kept."""
    root: Node = {}
    stack: list[tuple[int, Node]] = [(-1, root)]
    for line in lines:
        if not line.strip():
            continue
        depth = _indent(line)
        while stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1]
        body = line.strip()
        field = None if _GPU_HEADER_RE.match(body) else _FIELD_RE.match(body)
        if field:
            parent.setdefault(field.group(1).lower(), field.group(2).strip())
            continue
        section: Node = {}
        existing = parent.setdefault(body.lower(), section)
        stack.append((depth, existing if isinstance(existing, dict) else section))
    return root


def _get(node: Node, *path: str) -> str | None:
    current: Node | str = node
    for key in path:
        if not isinstance(current, dict) or key not in current:
            return None
        current = current[key]
    return current if isinstance(current, str) else None


def _value(node: Node, *path: str) -> str | None:
    """A field's text, None when absent or N/A."""
    raw = _get(node, *path)
    return None if raw is None or raw in ("N/A", "") else raw


def _enabled(node: Node, *path: str) -> bool | None:
    raw = _value(node, *path)
    return {"enabled": True, "disabled": False}.get(raw.lower()) if raw else None


def _width(node: Node, *path: str) -> int | None:
    raw = _value(node, *path)
    return int_or_none(raw[:-1]) if raw and raw.endswith("x") else int_or_none(raw)


def _mib(node: Node, *path: str) -> int | None:
    raw = _value(node, *path)
    return int_or_none(raw.removesuffix("MiB")) if raw else None


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:01:00.0`` as ``0000:01:00.0`` (the form lspci and sysfs use)."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _numa_node(gpu: Node) -> int | None:
    for key in ("numa node", "gpu numa id", "numa id"):
        value = int_or_none(_value(gpu, key))
        if value is not None:
            return value
    return None


def _gpu(bus_id: str, gpu: Node) -> dict:
    link = ("pci", "gpu link info")
    generation = (*link, "pcie generation")
    width = (*link, "link width")
    return {
        "bus_id": bus_id,
        "bdf": normalize_bus_id(bus_id),
        "product_name": _value(gpu, "product name"),
        "uuid": _value(gpu, "gpu uuid"),
        "persistence_mode": _enabled(gpu, "persistence mode"),
        "mig_mode_current": _value(gpu, "mig mode", "current"),
        "pcie_gen_current": int_or_none(_value(gpu, *generation, "current")),
        "pcie_gen_max": int_or_none(_value(gpu, *generation, "max")),
        "pcie_gen_device_current": int_or_none(_value(gpu, *generation, "device current")),
        "pcie_gen_device_max": int_or_none(_value(gpu, *generation, "device max")),
        "pcie_gen_host_max": int_or_none(_value(gpu, *generation, "host max")),
        "pcie_width_current": _width(gpu, *width, "current"),
        "pcie_width_max": _width(gpu, *width, "max"),
        "performance_state": _value(gpu, "performance state"),
        "memory_total_mib": _mib(gpu, "fb memory usage", "total"),
        "numa_node": _numa_node(gpu),
        "pcie_replays": int_or_none(_value(gpu, "pci", "replays since reset")),
        "pcie_replay_rollovers": int_or_none(_value(gpu, "pci", "replay number rollovers")),
    }


def parse_smi_q(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    tree = _tree(lines)
    if "attached gpus" not in tree and not any("nvsmi log" in line.lower() for line in lines):
        raise ParseError(
            f"{KIND}: no 'Attached GPUs' field and no NVSMI LOG banner; expected {EXPECTED}"
        )
    gpus = []
    for key, node in tree.items():
        match = _GPU_HEADER_RE.match(key.upper())
        if match and isinstance(node, dict):
            gpus.append(_gpu(match.group(1), node))
    attached = int_or_none(_get(tree, "attached gpus"))
    if attached is None:
        raise ParseError(f"{KIND}: 'Attached GPUs' is missing or not a number; expected {EXPECTED}")
    return {
        "driver_version": _value(tree, "driver version"),
        "cuda_version": _value(tree, "cuda version"),
        "attached_gpus": attached,
        "gpus": gpus,
    }
