"""CUDA samples ``p2pBandwidthLatencyTest``: device list, peer access, the matrices.

Matrices are lists of rows in device order (row = source device, column = peer, as
the sample prints them). A capture may hold any subset of the sections (pasted
excerpts often do); each section present must be whole.
"""

from __future__ import annotations

import re

from ._common import ParseError, require_text

KIND = "p2p-bandwidth"
EXPECTED = "the output of the CUDA sample p2pBandwidthLatencyTest"

_DEVICE_RE = re.compile(
    r"^Device: (?P<index>\d+), (?P<name>.+?), pciBusID: (?P<bus>[0-9a-fA-F]+), "
    r"pciDeviceID: (?P<device>[0-9a-fA-F]+), pciDomainID:\s*(?P<domain>[0-9a-fA-F]+)$"
)
_PEER_RE = re.compile(r"^Device=(?P<a>\d+) (?P<can>CAN|CANNOT) Access Peer Device=(?P<b>\d+)$")
_MATRIX_HEADER_RE = re.compile(r"^\s*(?P<label>D\\D|GPU|CPU)(?P<columns>(?:\s+\d+)+)\s*$")
_ROW_RE = re.compile(r"^\s*(?P<index>\d+)(?P<cells>(?:\s+-?[\d.]+)+)\s*$")

# Section titles as the sample prints them. Titles without a mode come from older
# releases, which measured writes only.
_TITLES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), key)
    for pattern, key in (
        (r"^P2P Connectivity Matrix$", "connectivity"),
        (
            r"^Unidirectional P2P=Disabled Bandwidth Matrix \(GB/s\)$",
            "unidirectional_p2p_disabled_gbytes_per_s",
        ),
        (
            r"^Unidirectional P2P=Enabled Bandwidth (?:\(P2P Writes\) )?Matrix \(GB/s\)$",
            "unidirectional_p2p_enabled_writes_gbytes_per_s",
        ),
        (
            r"^Unidirectional P2P=Enabled Bandwidth \(P2P Reads\) Matrix \(GB/s\)$",
            "unidirectional_p2p_enabled_reads_gbytes_per_s",
        ),
        (
            r"^Bidirectional P2P=Disabled Bandwidth Matrix \(GB/s\)$",
            "bidirectional_p2p_disabled_gbytes_per_s",
        ),
        (
            r"^Bidirectional P2P=Enabled Bandwidth Matrix \(GB/s\)$",
            "bidirectional_p2p_enabled_gbytes_per_s",
        ),
        (r"^P2P=Disabled Latency Matrix \(us\)$", "latency_p2p_disabled_{side}_us"),
        (
            r"^P2P=Enabled Latency (?:\(P2P Writes\) )?Matrix \(us\)$",
            "latency_p2p_enabled_writes_{side}_us",
        ),
        (
            r"^P2P=Enabled Latency \(P2P Reads\) Matrix \(us\)$",
            "latency_p2p_enabled_reads_{side}_us",
        ),
    )
)


def _title_key(line: str) -> str | None:
    stripped = line.strip()
    for pattern, key in _TITLES:
        if pattern.match(stripped):
            return key
    return None


def _read_matrix(lines: list[str], start: int, key: str) -> tuple[list[list[float]], int]:
    """The matrix whose rows follow the header at ``start``; returns it and the next index."""
    header = _MATRIX_HEADER_RE.match(lines[start])
    assert header is not None
    columns = [int(column) for column in header.group("columns").split()]
    rows: list[list[float]] = []
    index = start + 1
    while index < len(lines) and len(rows) < len(columns):
        row = _ROW_RE.match(lines[index].replace("\t", " "))
        if not row:
            break
        cells = [float(cell) for cell in row.group("cells").split()]
        if int(row.group("index")) != columns[len(rows)] or len(cells) != len(columns):
            raise ParseError(
                f"{KIND}: {key}: line {index + 1} ({lines[index].strip()!r}) does not hold "
                f"device {columns[len(rows)]}'s {len(columns)} values; the matrix is "
                "truncated or malformed."
            )
        rows.append(cells)
        index += 1
    if len(rows) != len(columns):
        raise ParseError(
            f"{KIND}: {key}: {len(rows)} of {len(columns)} rows; the matrix is cut. "
            f"Capture {EXPECTED} again, whole."
        )
    return rows, index


def _matrices(lines: list[str]) -> dict[str, list[list[float]]]:
    matrices: dict[str, list[list[float]]] = {}
    key: str | None = None
    index = 0
    while index < len(lines):
        title = _title_key(lines[index])
        if title:
            key = title
            index += 1
            continue
        header = _MATRIX_HEADER_RE.match(lines[index])
        if header and key:
            name = key.format(side=header.group("label").lower())
            rows, index = _read_matrix(lines, index, name)
            matrices[name] = rows
            continue
        index += 1
    return matrices


def parse_p2p_bandwidth(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    devices = []
    peer_access: dict[str, dict[str, bool]] = {}
    for line in lines:
        device = _DEVICE_RE.match(line.strip())
        if device:
            devices.append(
                {
                    "index": int(device.group("index")),
                    "name": device.group("name"),
                    "bdf": "{:04x}:{:02x}:{:02x}.0".format(
                        int(device.group("domain"), 16),
                        int(device.group("bus"), 16),
                        int(device.group("device"), 16),
                    ),
                }
            )
        peer = _PEER_RE.match(line.strip())
        if peer:
            peer_access.setdefault(peer.group("a"), {})[peer.group("b")] = (
                peer.group("can") == "CAN"
            )
    matrices = _matrices(lines)
    if not devices and not matrices:
        raise ParseError(
            f"{KIND}: no 'Device: N, <name>, pciBusID: ...' line and no known matrix title "
            f"(like 'Unidirectional P2P=Enabled Bandwidth (P2P Writes) Matrix (GB/s)'); "
            f"expected {EXPECTED}"
        )
    connectivity = matrices.pop("connectivity", None)
    return {
        "devices": devices,
        "peer_access": peer_access,
        "connectivity": (
            [[int(cell) for cell in row] for row in connectivity] if connectivity else None
        ),
        "matrices": matrices,
    }
