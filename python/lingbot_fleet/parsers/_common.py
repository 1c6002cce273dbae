"""Helpers shared by the parsers: the error type, text clean-up, bounded numbers, CPU lists,
partial results.

Every pattern here is linear in its input (no nested or overlapping quantifiers) and reads
ASCII digits only, so a hostile paste cannot make a parser slow or make ``int()`` accept
``²`` or a 5000-digit number.
"""

from __future__ import annotations

import re

# CSI sequences (ESC [ params final) and OSC sequences (ESC ] text BEL). Each alternative has
# one quantifier over a class that cannot match its terminator, so an unterminated escape
# costs one scan from its ESC, never a rescan per position.
_ANSI_ESCAPE_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*\x07")
_ESCAPE = "\x1b"
# Longest decimal number the parsers accept (digits, sign apart); a figure, an index or a
# CPU id never needs more.
MAX_NUMBER_DIGITS = 18
# sysfs cpulists name CPU ids up to the kernel's NR_CPUS; 65535 is far above any machine.
MAX_CPU_ID = 65535
_DIGITS = f"[0-9]{{1,{MAX_NUMBER_DIGITS}}}"
_INT_RE = re.compile(f"-?{_DIGITS}")
_DECIMAL_RE = re.compile(rf"-?{_DIGITS}(?:\.{_DIGITS})?")
_CPU_ID_RE = re.compile(r"[0-9]{1,5}")
_LONG_INT_RE = re.compile(r"-?[0-9]+")


class ParseError(ValueError):
    """The text is not the output the parser was asked to read."""


def strip_escapes(text: str) -> str:
    """``text`` without ANSI escapes, in time linear in its length: a scan that starts at
    an ESC stops at the next ESC, so an unterminated escape is never rescanned."""
    if _ESCAPE not in text:
        return text
    return _ANSI_ESCAPE_RE.sub("", text)


def clean_lines(text: str) -> list[str]:
    """Lines of ``text`` without ANSI escapes, carriage returns or trailing blanks."""
    without_escapes = strip_escapes(text)
    return [line.rstrip() for line in without_escapes.replace("\r", "").split("\n")]


def require_text(text: str, kind: str, what: str) -> list[str]:
    """Cleaned lines, or ParseError when there is nothing but whitespace."""
    lines = clean_lines(text)
    if not any(line.strip() for line in lines):
        raise ParseError(f"{kind}: the input is empty; expected {what}")
    return lines


def parse_int(text: str, what: str) -> int:
    """A decimal int of at most MAX_NUMBER_DIGITS ASCII digits; ParseError naming ``what``."""
    stripped = text.strip()
    if not _INT_RE.fullmatch(stripped):
        shown = stripped if len(stripped) <= 40 else f"{stripped[:40]}... ({len(stripped)} chars)"
        raise ParseError(
            f"{what} is {shown!r}, not a whole number of at most {MAX_NUMBER_DIGITS} digits;"
            " paste the command's output unchanged"
        )
    return int(stripped)


def parse_decimal(text: str, what: str) -> float:
    """A decimal figure (``12``, ``12.5``) of bounded length; ParseError naming ``what``."""
    stripped = text.strip()
    if not _DECIMAL_RE.fullmatch(stripped):
        shown = stripped if len(stripped) <= 40 else f"{stripped[:40]}... ({len(stripped)} chars)"
        raise ParseError(
            f"{what} is {shown!r}, not a decimal figure of at most {MAX_NUMBER_DIGITS} digits"
            " on either side of the point; paste the command's output unchanged"
        )
    return float(stripped)


def expand_cpu_list(text: str, max_cpu_id: int = MAX_CPU_ID) -> list[int]:
    """``"0-15,32-47"`` as a sorted list of CPU numbers; ``"N/A"`` or empty gives [].

    ValueError (ParseError is one) for a malformed list or a CPU id above ``max_cpu_id``,
    so ``0-4294967295`` is refused before anything is expanded.
    """
    stripped = text.strip()
    if stripped in ("", "N/A"):
        return []
    shown = stripped if len(stripped) <= 60 else f"{stripped[:60]}..."
    cpus: set[int] = set()
    for part in stripped.split(","):
        first, sep, last = part.strip().partition("-")
        if not _CPU_ID_RE.fullmatch(first) or (sep and not _CPU_ID_RE.fullmatch(last)):
            raise ParseError(
                f"malformed CPU list {shown!r}: {part!r} is not N or N-M with CPU ids of"
                f" at most 5 digits"
            )
        start = int(first)
        end = int(last) if sep else start
        if end < start:
            raise ParseError(f"malformed CPU list {shown!r}: range {part!r} runs backwards")
        if end > max_cpu_id:
            raise ParseError(
                f"malformed CPU list {shown!r}: CPU {end} is above the largest CPU id {max_cpu_id}"
            )
        cpus.update(range(start, end + 1))
    return sorted(cpus)


def _looks_numeric(text: str) -> bool:
    """Whether ``text`` was meant as a figure: it starts with a digit of any script, or with
    a sign or point before one. Words such as ``N/A`` or ``[Not Supported]`` were not."""
    head = text.lstrip("+-.")
    return bool(head) and head[0].isdigit()


def int_or_none(text: str | None, what: str = "a number") -> int | None:
    """An int from decimal text; None for an absent value or a word such as ``N/A``.

    A value meant as a figure that is not one (``5.5``, ``1.2.3``, ``²``, 5000 digits) is a
    ParseError naming ``what``, never a None that reads as "not reported".
    """
    if text is None:
        return None
    stripped = text.strip()
    if _INT_RE.fullmatch(stripped):
        return int(stripped)
    if _looks_numeric(stripped):
        parse_int(stripped, what)  # raises, naming the field and the value
    return None


def count_or_none(text: str | None, what: str) -> int | None:
    """int_or_none for a count or a link figure, which is never negative."""
    value = int_or_none(text, what)
    if value is not None and value < 0:
        raise ParseError(
            f"{what} is {value}, a negative count; paste the command's output unchanged"
        )
    return value


def whole(result: dict) -> dict:
    """``result`` marked as read from the whole output."""
    result["partial"] = False
    return result


def partial(result: dict, note: str) -> dict:
    """``result`` marked as read from part of the output; ``note`` says what is missing."""
    result["partial"] = True
    result["note"] = note
    return result
