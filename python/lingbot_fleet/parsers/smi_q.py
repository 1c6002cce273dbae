"""``nvidia-smi -q``: driver and CUDA version, and per GPU the fields the toolkit uses.

The output is an indented tree of ``Key : Value`` lines and section titles; old
drivers indent with tabs, new ones with spaces, and field names change case between
driver generations (``Replays since reset`` / ``Replays Since Reset``), so keys are
compared case-insensitively.

Also read, as partial results: a capture without the header (banner, driver version,
``Attached GPUs``) that starts at a ``GPU <bus id>`` line, at a GPU's ``PCI`` section or
at its ``GPU Link Info`` block; each such section is one GPU, in order.
"""

from __future__ import annotations

import re

from ._common import ParseError, count_or_none, int_or_none, partial, require_text, whole

KIND = "smi-q"
EXPECTED = "the output of `nvidia-smi -q` or a part of it"
FRAGMENT_NOTES = {
    "gpu": (
        "no header (NVSMI LOG banner, Driver Version, Attached GPUs): driver_version,"
        " cuda_version and attached_gpus are unknown"
    ),
    "pci": (
        "PCI sections alone: the header and every GPU field outside the PCI section are"
        " unknown; bus_id comes from the section's Bus Id"
    ),
    "gpu link info": (
        "GPU Link Info blocks alone: the header, the GPU (bus_id, bdf) and every field"
        " outside the block are unknown"
    ),
}

_GPU_HEADER_RE = re.compile(r"^GPU ([0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$")
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


def _field(path: tuple[str, ...]) -> str:
    """The field's name as nvidia-smi -q prints its path, for messages."""
    return f"smi-q: {' > '.join(path)}"


def _count(node: Node, *path: str) -> int | None:
    return count_or_none(_value(node, *path), _field(path))


def _width(node: Node, *path: str) -> int | None:
    raw = _value(node, *path)
    return count_or_none(raw.removesuffix("x") if raw else raw, _field(path))


def _mib(node: Node, *path: str) -> int | None:
    raw = _value(node, *path)
    return count_or_none(raw.removesuffix("MiB") if raw else raw, _field(path))


def normalize_bus_id(bus_id: str) -> str:
    """``00000000:01:00.0`` as ``0000:01:00.0`` (the form lspci and sysfs use)."""
    domain, _, rest = bus_id.partition(":")
    return f"{int(domain, 16):04x}:{rest.lower()}"


def _numa_node(gpu: Node) -> int | None:
    for key in ("numa node", "gpu numa id", "numa id"):
        value = int_or_none(_value(gpu, key), _field((key,)))
        if value is not None:
            return value
    return None


def _gpu(bus_id: str | None, gpu: Node) -> dict:
    link = ("pci", "gpu link info")
    generation = (*link, "pcie generation")
    width = (*link, "link width")
    return {
        "bus_id": bus_id,
        "bdf": normalize_bus_id(bus_id) if bus_id else None,
        "product_name": _value(gpu, "product name"),
        "uuid": _value(gpu, "gpu uuid"),
        "persistence_mode": _enabled(gpu, "persistence mode"),
        "mig_mode_current": _value(gpu, "mig mode", "current"),
        "pcie_gen_current": _count(gpu, *generation, "current"),
        "pcie_gen_max": _count(gpu, *generation, "max"),
        "pcie_gen_device_current": _count(gpu, *generation, "device current"),
        "pcie_gen_device_max": _count(gpu, *generation, "device max"),
        "pcie_gen_host_max": _count(gpu, *generation, "host max"),
        "pcie_width_current": _width(gpu, *width, "current"),
        "pcie_width_max": _width(gpu, *width, "max"),
        "performance_state": _value(gpu, "performance state"),
        "memory_total_mib": _mib(gpu, "fb memory usage", "total"),
        "numa_node": _numa_node(gpu),
        "pcie_replays": _count(gpu, "pci", "replays since reset"),
        "pcie_replay_rollovers": _count(gpu, "pci", "replay number rollovers"),
    }


def _gpus(tree: Node) -> list[dict]:
    gpus = []
    for key, node in tree.items():
        match = _GPU_HEADER_RE.match(key.upper())
        if match and isinstance(node, dict):
            gpus.append(_gpu(match.group(1), node))
    return gpus


def _sections(lines: list[str], title: str) -> list[Node]:
    """One tree per section that starts with ``title`` at the first line's indentation;
    lines up to the next such title (its siblings in the output) are in its tree."""
    body = [line for line in lines if line.strip() and line.strip() != "--"]
    depth = _indent(body[0])
    sections: list[list[str]] = []
    for line in body:
        if _indent(line) == depth and line.strip().lower() == title:
            sections.append([])
        sections[-1].append(line)
    return [_tree(section) for section in sections]


def _fragment(lines: list[str]) -> dict:
    first = next(line.strip() for line in lines if line.strip())
    shape = "gpu" if _GPU_HEADER_RE.match(first) else first.lower()
    if shape == "gpu":
        gpus = _gpus(_tree(lines))
    elif shape == "pci":
        gpus = [_gpu(_value(gpu, "pci", "bus id"), gpu) for gpu in _sections(lines, shape)]
    elif shape == "gpu link info":
        gpus = [_gpu(None, {"pci": pci}) for pci in _sections(lines, shape)]
    else:
        gpus = []
    if not gpus or not any(_known(gpu) for gpu in gpus):
        raise ParseError(
            f"{KIND}: no 'Attached GPUs' field or NVSMI LOG banner, and the text does not"
            " start at a 'GPU 00000000:81:00.0' line, a PCI section or a GPU Link Info"
            f" block; expected {EXPECTED}"
        )
    result = {"driver_version": None, "cuda_version": None, "attached_gpus": None, "gpus": gpus}
    return partial(result, FRAGMENT_NOTES[shape])


def _known(gpu: dict) -> bool:
    return any(value is not None for value in gpu.values())


def parse_smi_q(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    tree = _tree(lines)
    if "attached gpus" not in tree and not any("nvsmi log" in line.lower() for line in lines):
        return _fragment(lines)
    gpus = _gpus(tree)
    attached = count_or_none(_get(tree, "attached gpus"), "smi-q: Attached GPUs")
    if attached is None:
        raise ParseError(f"{KIND}: 'Attached GPUs' is missing or not a number; expected {EXPECTED}")
    result = {
        "driver_version": _value(tree, "driver version"),
        "cuda_version": _value(tree, "cuda version"),
        "attached_gpus": attached,
        "gpus": gpus,
    }
    if len(gpus) < attached:
        return partial(
            result,
            f"the text describes {len(gpus)} of the {attached} attached GPUs"
            " (a cut capture, or nvidia-smi -q -i)",
        )
    return whole(result)
