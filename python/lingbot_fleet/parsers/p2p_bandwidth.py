"""CUDA samples ``p2pBandwidthLatencyTest``: device list, peer access, the matrices.

Matrices are lists of rows in device order (row = source device, column = peer, as
the sample prints them). A capture may hold any subset of the sections (pasted
excerpts often do); each section present must be whole.
"""

from __future__ import annotations

import re

from ._common import ParseError, parse_decimal, parse_int, require_text

KIND = "p2p-bandwidth"
EXPECTED = "the output of the CUDA sample p2pBandwidthLatencyTest"

_DEVICE_RE = re.compile(
    r"^Device: (?P<index>[0-9]{1,5}), (?P<name>[^,]+), pciBusID: (?P<bus>[0-9a-fA-F]{1,8}), "
    r"pciDeviceID: (?P<device>[0-9a-fA-F]{1,8}), pciDomainID: ?(?P<domain>[0-9a-fA-F]{1,8})$"
)
_PEER_RE = re.compile(
    r"^Device=(?P<a>[0-9]{1,5}) (?P<can>CAN|CANNOT) Access Peer Device=(?P<b>[0-9]{1,5})$"
)
# Matrix headers and rows are split on whitespace and each token checked on its own: no
# pattern repeats a group, so a long or hostile line costs one pass.
_MATRIX_LABELS = ("D\\D", "GPU", "CPU")
_COLUMN_RE = re.compile(r"[0-9]{1,5}")


def _matrix_header(line: str) -> tuple[str, list[int]] | None:
    """(label, column numbers) of a matrix header such as ``D\\D  0  1``, or None."""
    tokens = line.split()
    if len(tokens) < 2 or tokens[0] not in _MATRIX_LABELS:
        return None
    if not all(_COLUMN_RE.fullmatch(token) for token in tokens[1:]):
        return None
    return tokens[0], [int(token) for token in tokens[1:]]


def _matrix_row(line: str) -> tuple[int, list[str]] | None:
    """(row index, cell texts) of a line that starts with a row number, such as
    ``0  1.00  2.5``, or None. The cells are checked by the caller, so a figure that is not
    one is named, not taken for the end of the matrix."""
    tokens = line.split()
    if len(tokens) < 2 or not _COLUMN_RE.fullmatch(tokens[0]):
        return None
    return int(tokens[0]), tokens[1:]


def _figure(cell: str, what: str) -> float:
    """A measured figure: a decimal of bounded length, never negative."""
    value = parse_decimal(cell, what)
    if value < 0:
        raise ParseError(
            f"{what} is {cell!r}, a negative figure, which no bandwidth or latency is; paste the"
            " command's output unchanged"
        )
    return value


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
    header = _matrix_header(lines[start])
    assert header is not None
    columns = header[1]
    rows: list[list[float]] = []
    index = start + 1
    while index < len(lines) and len(rows) < len(columns):
        row = _matrix_row(lines[index])
        if not row:
            break
        row_index, cell_texts = row
        cells = [_figure(cell, f"{KIND}: {key}: line {index + 1}: value") for cell in cell_texts]
        if row_index != columns[len(rows)] or len(cells) != len(columns):
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
        header = _matrix_header(lines[index])
        if header and key:
            name = key.format(side=header[0].lower())
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
                    "index": parse_int(device.group("index"), f"{KIND}: device index"),
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
