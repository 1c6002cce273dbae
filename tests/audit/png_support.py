"""A small PNG decoder (standard library only) for the report's screenshot test.

It reads what a browser's screenshot is: 8-bit RGB or RGBA, not interlaced, any of the
five row filters. Anything else is refused with a ValueError naming what it found.
"""

from __future__ import annotations

import struct
import zlib
from collections import Counter
from dataclasses import dataclass

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CHANNELS_BY_COLOUR_TYPE = {2: 3, 6: 4}
FILTER_NONE, FILTER_SUB, FILTER_UP, FILTER_AVERAGE, FILTER_PAETH = range(5)


@dataclass(frozen=True)
class DecodedPng:
    width_px: int
    height_px: int
    channels: int
    pixels: bytes  # rows top to bottom, each width_px * channels bytes, no filter bytes

    def colour_counts(self, first_row: int = 0, end_row: int | None = None) -> Counter:
        """How many pixels of rows [first_row, end_row) have each (r, g, b) colour."""
        stride = self.width_px * self.channels
        end = self.height_px if end_row is None else min(end_row, self.height_px)
        samples = iter(self.pixels[first_row * stride : end * stride])
        if self.channels == 3:
            return Counter(zip(samples, samples, samples, strict=True))
        return Counter(
            (r, g, b) for r, g, b, _alpha in zip(samples, samples, samples, samples, strict=True)
        )


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    if not data.startswith(PNG_SIGNATURE):
        raise ValueError("not a PNG file: the signature is missing")
    chunks = []
    position = len(PNG_SIGNATURE)
    while position < len(data):
        if position + 12 > len(data):
            raise ValueError(f"truncated chunk header at byte {position}")
        (length,) = struct.unpack(">I", data[position : position + 4])
        kind = data[position + 4 : position + 8]
        body = data[position + 8 : position + 8 + length]
        if len(body) != length or position + 12 + length > len(data):
            raise ValueError(f"truncated {kind!r} chunk at byte {position}")
        (crc,) = struct.unpack(">I", data[position + 8 + length : position + 12 + length])
        if zlib.crc32(kind + body) != crc:
            raise ValueError(f"bad CRC in the {kind!r} chunk at byte {position}")
        chunks.append((kind, body))
        position += 12 + length
        if kind == b"IEND":
            return chunks
    raise ValueError("no IEND chunk")


def _add_bytes(first: bytes, second: bytes) -> bytes:
    """Byte-wise (first + second) mod 256 over whole rows: the low seven bits of each byte
    add without a carry into the next byte, the top bit is the XOR of both top bits and
    that carry."""
    size = len(first)
    low_bits = int.from_bytes(b"\x7f" * size, "big")
    top_bits = int.from_bytes(b"\x80" * size, "big")
    a = int.from_bytes(first, "big")
    b = int.from_bytes(second, "big")
    total = ((a & low_bits) + (b & low_bits)) ^ ((a ^ b) & top_bits)
    return total.to_bytes(size, "big")


def _paeth(raw: bytes, prior: bytes, bpp: int) -> bytearray:
    row = bytearray(raw)
    for i in range(len(row)):
        left = row[i - bpp] if i >= bpp else 0
        up = prior[i]
        up_left = prior[i - bpp] if i >= bpp else 0
        estimate = left + up - up_left
        to_left, to_up, to_up_left = (
            abs(estimate - left),
            abs(estimate - up),
            abs(estimate - up_left),
        )
        if to_left <= to_up and to_left <= to_up_left:
            predictor = left
        elif to_up <= to_up_left:
            predictor = up
        else:
            predictor = up_left
        row[i] = (row[i] + predictor) & 0xFF
    return row


def _unfilter(kind: int, raw: bytes, prior: bytes, bpp: int) -> bytes:
    if kind == FILTER_NONE:
        return raw
    if kind == FILTER_UP:
        return _add_bytes(raw, prior)
    if kind == FILTER_SUB:
        row = bytearray(raw)
        for i in range(bpp, len(row)):
            row[i] = (row[i] + row[i - bpp]) & 0xFF
        return bytes(row)
    if kind == FILTER_AVERAGE:
        row = bytearray(raw)
        for i in range(len(row)):
            left = row[i - bpp] if i >= bpp else 0
            row[i] = (row[i] + ((left + prior[i]) >> 1)) & 0xFF
        return bytes(row)
    if kind == FILTER_PAETH:
        return bytes(_paeth(raw, prior, bpp))
    raise ValueError(f"unknown row filter type {kind}")


def decode_png(data: bytes) -> DecodedPng:
    chunks = _chunks(data)
    if not chunks or chunks[0][0] != b"IHDR" or len(chunks[0][1]) != 13:
        raise ValueError("the first chunk is not a 13-byte IHDR")
    width_px, height_px, bit_depth, colour_type, compression, filtering, interlace = struct.unpack(
        ">IIBBBBB", chunks[0][1]
    )
    if bit_depth != 8 or colour_type not in CHANNELS_BY_COLOUR_TYPE:
        raise ValueError(
            f"only 8-bit RGB or RGBA is read; this PNG has bit depth {bit_depth}, "
            f"colour type {colour_type}"
        )
    if (compression, filtering, interlace) != (0, 0, 0):
        raise ValueError(
            f"unsupported compression {compression}, filter method {filtering} or "
            f"interlace {interlace}"
        )
    channels = CHANNELS_BY_COLOUR_TYPE[colour_type]
    stride = width_px * channels
    stream = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))
    if len(stream) != height_px * (stride + 1):
        raise ValueError(
            f"image data is {len(stream)} bytes, {width_px}x{height_px} needs "
            f"{height_px * (stride + 1)}"
        )
    rows = []
    prior = bytes(stride)
    for y in range(height_px):
        start = y * (stride + 1)
        prior = _unfilter(stream[start], stream[start + 1 : start + 1 + stride], prior, channels)
        rows.append(prior)
    return DecodedPng(width_px, height_px, channels, b"".join(rows))
