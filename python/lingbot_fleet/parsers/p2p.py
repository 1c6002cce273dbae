"""``nvidia-smi topo -p2p r|w|n|a|p``: the peer-to-peer status matrix of one capability."""

from __future__ import annotations

import re

from ._common import ParseError, require_text

KIND = "p2p"
EXPECTED = "the output of `nvidia-smi topo -p2p r` (or w, n, a, p)"

# Words from the legend of nvidia-smi topo -p2p.
STATUS_WORDS = frozenset({"X", "OK", "CNS", "GNS", "TNS", "NS", "DR", "U"})
_GPU_NAME_RE = re.compile(r"GPU[0-9]{1,5}")


def parse_p2p(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    header_index = next(
        (
            index
            for index, line in enumerate(lines)
            if line.split()
            and all(_GPU_NAME_RE.fullmatch(token) for token in line.split())
            and line.split()[0] == "GPU0"
        ),
        None,
    )
    if header_index is None:
        raise ParseError(
            f"{KIND}: no header line listing only GPU names (like '\\tGPU0\\tGPU1'); "
            f"expected {EXPECTED}"
        )
    gpus = lines[header_index].split()
    status: dict[str, dict[str, str]] = {}
    for line_number, line in enumerate(lines[header_index + 1 :], start=header_index + 2):
        tokens = line.split()
        if not tokens:
            if status:
                break
            continue
        if tokens[0] not in gpus:
            break
        cells = tokens[1:]
        if len(cells) != len(gpus):
            raise ParseError(
                f"{KIND}: row {tokens[0]} (line {line_number}) has {len(cells)} cells but the "
                f"header names {len(gpus)} GPUs; the row is truncated or malformed."
            )
        unknown = [cell for cell in cells if cell not in STATUS_WORDS]
        if unknown:
            raise ParseError(
                f"{KIND}: row {tokens[0]} (line {line_number}): {unknown[0]!r} is not a "
                f"P2P status ({', '.join(sorted(STATUS_WORDS))})."
            )
        status[tokens[0]] = dict(zip(gpus, cells, strict=True))
    missing = [gpu for gpu in gpus if gpu not in status]
    if missing:
        raise ParseError(
            f"{KIND}: no row for {', '.join(missing)}; the output is cut. Capture "
            f"{EXPECTED} again, whole."
        )
    return {"gpus": gpus, "status": status}
