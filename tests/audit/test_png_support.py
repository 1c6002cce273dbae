"""The screenshot test's PNG decoder, on images written here with every row filter."""

from __future__ import annotations

import struct
import zlib

import pytest
from png_support import decode_png


def _chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def _paeth_predictor(left: int, up: int, up_left: int) -> int:
    estimate = left + up - up_left
    distances = (abs(estimate - left), abs(estimate - up), abs(estimate - up_left))
    if distances[0] <= distances[1] and distances[0] <= distances[2]:
        return left
    return up if distances[1] <= distances[2] else up_left


def _filtered(kind: int, row: bytes, prior: bytes, bpp: int) -> bytes:
    out = bytearray()
    for i, value in enumerate(row):
        left = row[i - bpp] if i >= bpp else 0
        up_left = prior[i - bpp] if i >= bpp else 0
        predictor = (
            0,
            left,
            prior[i],
            (left + prior[i]) // 2,
            _paeth_predictor(left, prior[i], up_left),
        )[kind]
        out.append((value - predictor) & 0xFF)
    return bytes(out)


def encode_png(width_px: int, rows: list[bytes], channels: int, filters: list[int]) -> bytes:
    """A PNG of the given rows, row y filtered with filters[y]."""
    colour_type = {3: 2, 4: 6}[channels]
    stream = b""
    prior = bytes(width_px * channels)
    for row, kind in zip(rows, filters, strict=True):
        stream += bytes([kind]) + _filtered(kind, row, prior, channels)
        prior = row
    header = struct.pack(">IIBBBBB", width_px, len(rows), 8, colour_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", zlib.compress(stream)[:10])
        + _chunk(b"IDAT", zlib.compress(stream)[10:])
        + _chunk(b"IEND", b"")
    )


def sample_rows(width_px: int, height_px: int, channels: int) -> list[bytes]:
    return [
        bytes(
            (x * 37 + y * 11 + c * 101 + (x * y) % 7) & 0xFF
            for x in range(width_px)
            for c in range(channels)
        )
        for y in range(height_px)
    ]


@pytest.mark.parametrize("channels", [3, 4])
def test_every_filter_decodes_to_the_original_rows(channels: int) -> None:
    rows = sample_rows(9, 10, channels)
    filters = [0, 1, 2, 3, 4, 4, 3, 2, 1, 0]
    decoded = decode_png(encode_png(9, rows, channels, filters))
    assert (decoded.width_px, decoded.height_px, decoded.channels) == (9, 10, channels)
    assert decoded.pixels == b"".join(rows)


def test_colour_counts_by_rows_ignore_alpha() -> None:
    rows = [bytes([255, 0, 0, 255] * 3), bytes([255, 0, 0, 128, 0, 0, 255, 255, 0, 0, 255, 0])]
    decoded = decode_png(encode_png(3, rows, 4, [0, 2]))
    assert decoded.colour_counts() == {(255, 0, 0): 4, (0, 0, 255): 2}
    assert decoded.colour_counts(1) == {(255, 0, 0): 1, (0, 0, 255): 2}


def test_damaged_or_unsupported_pngs_are_refused() -> None:
    good = encode_png(2, sample_rows(2, 2, 3), 3, [0, 1])
    with pytest.raises(ValueError, match="signature"):
        decode_png(b"GIF89a" + good[6:])
    damaged = bytearray(good)
    damaged[-20] ^= 0xFF
    with pytest.raises(ValueError, match="bad CRC"):
        decode_png(bytes(damaged))
    grey = _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
    with pytest.raises(ValueError, match="colour type 0"):
        decode_png(b"\x89PNG\r\n\x1a\n" + grey + _chunk(b"IEND", b""))
    with pytest.raises(ValueError, match="no IEND"):
        decode_png(good[: -len(_chunk(b"IEND", b""))])
