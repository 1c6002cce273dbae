"""Helpers shared by the parsers: the error type, text clean-up, CPU lists, partial results."""

from __future__ import annotations

import re

_ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


class ParseError(ValueError):
    """The text is not the output the parser was asked to read."""


def clean_lines(text: str) -> list[str]:
    """Lines of ``text`` without ANSI escapes, carriage returns or trailing blanks."""
    without_escapes = _ANSI_ESCAPE_RE.sub("", text)
    return [line.rstrip() for line in without_escapes.replace("\r", "").split("\n")]


def require_text(text: str, kind: str, what: str) -> list[str]:
    """Cleaned lines, or ParseError when there is nothing but whitespace."""
    lines = clean_lines(text)
    if not any(line.strip() for line in lines):
        raise ParseError(f"{kind}: the input is empty; expected {what}")
    return lines


def expand_cpu_list(text: str) -> list[int]:
    """``"0-15,32-47"`` as a sorted list of CPU numbers; ``"N/A"`` or empty gives []."""
    stripped = text.strip()
    if stripped in ("", "N/A"):
        return []
    cpus: set[int] = set()
    for part in stripped.split(","):
        first, sep, last = part.partition("-")
        if not first.isdigit() or (sep and not last.isdigit()):
            raise ValueError(f"malformed CPU list {text!r}")
        start = int(first)
        end = int(last) if sep else start
        if end < start:
            raise ValueError(f"malformed CPU list {text!r}: range {part!r} runs backwards")
        cpus.update(range(start, end + 1))
    return sorted(cpus)


def int_or_none(text: str | None) -> int | None:
    """An int from decimal text, None for N/A, empty or anything not a number."""
    if text is None:
        return None
    stripped = text.strip()
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    return None


def whole(result: dict) -> dict:
    """``result`` marked as read from the whole output."""
    result["partial"] = False
    return result


def partial(result: dict, note: str) -> dict:
    """``result`` marked as read from part of the output; ``note`` says what is missing."""
    result["partial"] = True
    result["note"] = note
    return result
