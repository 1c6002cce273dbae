"""``/etc/default/grub``: its variables and the kernel parameter lists.

The file is a shell fragment of ``NAME=value`` lines. Values are unquoted the way the
shell does it: single quotes literal, double quotes with ``\\`` escapes and ``$NAME`` /
``${NAME}`` expansion from earlier assignments, backquotes and ``$(...)`` kept as
written (they are commands, not evaluated here). Kernel parameter lists are split with
the tokenizer of :mod:`lingbot_fleet.cmdline`.
"""

from __future__ import annotations

import re

from ..cmdline import parse_cmdline
from ._common import ParseError, require_text

KIND = "grub"
EXPECTED = "the content of /etc/default/grub (NAME=value lines)"

_ASSIGNMENT_RE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_VARIABLE_RE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
CMDLINE_VARIABLES = {
    "cmdline_linux": "GRUB_CMDLINE_LINUX",
    "cmdline_linux_default": "GRUB_CMDLINE_LINUX_DEFAULT",
}


class _UnterminatedError(Exception):
    """A quote or command substitution that the line does not close."""


def _expand(text: str, variables: dict[str, str]) -> str:
    return _VARIABLE_RE.sub(lambda m: variables.get(m.group(1) or m.group(2), ""), text)


def _read_until(raw: str, start: int, closing: str) -> int:
    end = raw.find(closing, start)
    if end < 0:
        raise _UnterminatedError
    return end


def _shell_value(raw: str, variables: dict[str, str]) -> tuple[str, str]:
    """The value of one assignment and what follows it (a comment or nothing)."""
    parts: list[str] = []
    index = 0
    while index < len(raw) and not raw[index].isspace():
        char = raw[index]
        if char == "'":
            end = _read_until(raw, index + 1, "'")
            parts.append(raw[index + 1 : end])
            index = end + 1
        elif char == '"':
            index = _double_quoted(raw, index + 1, variables, parts)
        elif char == "`":
            end = _read_until(raw, index + 1, "`")
            parts.append(raw[index : end + 1])
            index = end + 1
        elif raw.startswith("$(", index):
            end = _read_until(raw, index + 2, ")")
            parts.append(raw[index : end + 1])
            index = end + 1
        elif char == "\\" and index + 1 < len(raw):
            parts.append(raw[index + 1])
            index += 2
        elif char == "$":
            variable = _VARIABLE_RE.match(raw, index)
            parts.append(
                variables.get(variable.group(1) or variable.group(2), "") if variable else "$"
            )
            index = variable.end() if variable else index + 1
        else:
            literal = re.match(r"[^\s'\"`\\$]+", raw[index:])
            assert literal is not None
            parts.append(literal.group(0))
            index += len(literal.group(0))
    return "".join(parts), raw[index:].strip()


def _double_quoted(raw: str, index: int, variables: dict[str, str], parts: list[str]) -> int:
    chunk: list[str] = []
    while True:
        if index >= len(raw):
            raise _UnterminatedError
        char = raw[index]
        if char == '"':
            parts.append(_expand("".join(chunk), variables))
            return index + 1
        if char == "\\" and index + 1 < len(raw) and raw[index + 1] in '"\\$`\n':
            chunk.append(raw[index + 1] if raw[index + 1] != "\n" else "")
            index += 2
            continue
        if char == "`":
            end = _read_until(raw, index + 1, "`")
            chunk.append(raw[index : end + 1])
            index = end + 1
            continue
        chunk.append(char)
        index += 1


def parse_grub(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    variables: dict[str, str] = {}
    assignments: list[dict] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        first_line = index
        statement = line
        while True:
            match = _ASSIGNMENT_RE.match(statement)
            if not match:
                raise ParseError(
                    f"{KIND}: line {first_line} is not a NAME=value assignment: "
                    f"{line.strip()!r}; expected {EXPECTED}"
                )
            try:
                value, rest = _shell_value(match.group(2), variables)
                break
            except _UnterminatedError:
                if index >= len(lines):
                    raise ParseError(
                        f"{KIND}: the quote opened on line {first_line} is never closed; "
                        "close it in the file."
                    ) from None
                statement += "\n" + lines[index]
                index += 1
        if rest and not rest.startswith("#"):
            raise ParseError(
                f"{KIND}: line {first_line} has {rest!r} after the value of {match.group(1)}; "
                "a value with spaces must be quoted."
            )
        name = match.group(1)
        variables[name] = value
        assignments.append({"name": name, "value": value, "line": first_line})
    if not any(name.startswith("GRUB_") for name in variables):
        raise ParseError(f"{KIND}: no GRUB_* variable is set; expected {EXPECTED}")
    result: dict = {"variables": variables, "assignments": assignments}
    for key, variable in CMDLINE_VARIABLES.items():
        raw = variables.get(variable)
        result[key] = (
            None
            if raw is None
            else [{"name": p.name, "value": p.value} for p in parse_cmdline(raw)]
        )
    return result
