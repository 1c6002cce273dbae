"""``nvidia-smi topo -m``: the GPU/NIC connection matrix, CPU and NUMA affinity."""

from __future__ import annotations

import re

from ._common import ParseError, expand_cpu_list, require_text

KIND = "topo"
EXPECTED = "the output of `nvidia-smi topo -m`"

# Columns after the device columns, in the order nvidia-smi prints them.
TRAILING_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LINK_LABEL_RE = re.compile(r"X|SYS|NODE|PHB|PXB|PIX|PXN|NV[0-9]{1,3}")
_GPU_NAME_RE = re.compile(r"GPU[0-9]{1,5}")
_NIC_LEGEND_RE = re.compile(r"^\s*(NIC[0-9]{1,5})\s*:\s*(\S+)\s*$")
# Old drivers said SOC for what is now SYS.
_LABEL_ALIASES = {"SOC": "SYS"}


def normalize_link_label(raw: str) -> str | None:
    """The label as today's nvidia-smi prints it, None when it is not a link label."""
    label = _LABEL_ALIASES.get(raw, raw)
    return label if _LINK_LABEL_RE.fullmatch(label) else None


def _split_header(line: str) -> tuple[list[str], list[str]]:
    """Device column names and the trailing column names of the header line."""
    positions = sorted((line.find(name), name) for name in TRAILING_COLUMNS if line.find(name) >= 0)
    devices_end = positions[0][0] if positions else len(line)
    devices = line[:devices_end].split()
    return devices, [name for _, name in positions]


def _find_header(lines: list[str]) -> int:
    """The header starts with GPU0; the GPU0 row starts with GPU0 and then its self X."""
    for index, line in enumerate(lines):
        tokens = line.split()
        if tokens and tokens[0] == "GPU0" and (len(tokens) == 1 or tokens[1] != "X"):
            return index
    raise ParseError(
        f"{KIND}: no header line naming GPU0 (like '\\tGPU0\\tGPU1\\tCPU Affinity'); "
        f"expected {EXPECTED}"
    )


def _parse_row(
    line: str, devices: list[str], trailing: list[str], row_name: str, line_number: int
) -> tuple[list[str], list[str]]:
    cells = line.split()[1:]
    if len(cells) < len(devices):
        raise ParseError(
            f"{KIND}: row {row_name} (line {line_number}) has {len(cells)} cells but the "
            f"header names {len(devices)} devices; the row is truncated. Capture "
            f"{EXPECTED} again, whole."
        )
    link_cells, extra = cells[: len(devices)], cells[len(devices) :]
    if row_name.startswith("GPU") and len(extra) != len(trailing):
        raise ParseError(
            f"{KIND}: row {row_name} (line {line_number}) has {len(extra)} values after "
            f"the links but the header names {len(trailing)} ({', '.join(trailing) or 'none'}); "
            "the row is truncated or malformed."
        )
    if not row_name.startswith("GPU") and extra:
        raise ParseError(
            f"{KIND}: row {row_name} (line {line_number}) has {len(extra)} cells more than "
            "the header has devices; the matrix is malformed."
        )
    labels = []
    for column, raw in zip(devices, link_cells, strict=True):
        label = normalize_link_label(raw)
        if label is None:
            raise ParseError(
                f"{KIND}: row {row_name} (line {line_number}), column {column}: {raw!r} is "
                "not a link label (X, SYS, SOC, NODE, PHB, PXB, PIX, PXN, NV<n>)."
            )
        labels.append(label)
    return labels, extra


_NUMA_SPAN_RE = re.compile(r"[0-9]{1,5}(?:[-,][0-9]{1,5}){1,64}")


def _numa_node(raw: str, where: str) -> int | None:
    """NUMA Affinity is one node, N/A, or a span when the GPU spans nodes (then None); a
    value meant as a number that is not one (``²``, ``1.5``) is a ParseError."""
    if re.fullmatch(r"[0-9]{1,5}", raw):
        return int(raw)
    if _NUMA_SPAN_RE.fullmatch(raw) or not raw[:1].isdigit():
        return None
    raise ParseError(
        f"{where}: NUMA Affinity is {raw[:40]!r}, not a node number, a span of nodes or N/A;"
        " paste the output of `nvidia-smi topo -m` unchanged"
    )


def _nic_legend(lines: list[str]) -> dict[str, str]:
    nics: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_legend = True
            continue
        if in_legend:
            match = _NIC_LEGEND_RE.match(line)
            if match:
                nics[match.group(1)] = match.group(2)
            elif line.strip():
                in_legend = False
    return nics


def parse_topo(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    header_index = _find_header(lines)
    devices, trailing = _split_header(lines[header_index])
    gpu_names = [name for name in devices if _GPU_NAME_RE.fullmatch(name)]
    rows: dict[str, tuple[list[str], list[str]]] = {}
    for offset, line in enumerate(lines[header_index + 1 :], start=header_index + 2):
        tokens = line.split()
        if not tokens:
            if rows:
                break
            continue
        if tokens[0] not in devices:
            break
        rows[tokens[0]] = _parse_row(line, devices, trailing, tokens[0], offset)
    missing = [name for name in gpu_names if name not in rows]
    if missing:
        raise ParseError(
            f"{KIND}: the header names {', '.join(missing)} but there is no row for "
            f"{'it' if len(missing) == 1 else 'them'}; the output is cut. Capture "
            f"{EXPECTED} again, whole."
        )
    legend = _nic_legend(lines)
    nic_columns = [name for name in devices if name not in gpu_names]
    gpus = []
    links: dict[str, dict[str, str]] = {}
    nic_links: dict[str, dict[str, str]] = {}
    for name in gpu_names:
        labels, extra = rows[name]
        values = dict(zip(trailing, extra, strict=True))
        try:
            cpu_affinity = expand_cpu_list(values.get("CPU Affinity", "N/A"))
        except ValueError as error:
            raise ParseError(f"{KIND}: row {name}: {error}") from None
        gpus.append(
            {
                "name": name,
                "cpu_affinity": cpu_affinity,
                "numa_node": _numa_node(values.get("NUMA Affinity", "N/A"), f"{KIND}: row {name}"),
            }
        )
        by_column = dict(zip(devices, labels, strict=True))
        links[name] = {gpu: by_column[gpu] for gpu in gpu_names}
        if nic_columns:
            nic_links[name] = {nic: by_column[nic] for nic in nic_columns}
    result: dict = {
        "gpus": gpus,
        "links": links,
        "nics": {nic: legend.get(nic, nic) for nic in nic_columns},
    }
    if nic_links:
        result["nic_links"] = nic_links
    return result
