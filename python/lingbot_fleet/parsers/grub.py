"""``/etc/default/grub``: its variables and the kernel parameter lists.

The file is read by :mod:`lingbot_fleet.boot.grub`, the reader the kernel_cmdline role uses,
so this kind reports what the toolkit itself would make of the file: values unquoted
the way ``sh`` does, ``$NAME`` / ``${NAME}`` expanded from earlier assignments, and
values that need a command run (``$(...)``, backquotes) kept as written and listed in
``unevaluated``. Kernel parameter lists are split with the tokenizer of
:mod:`lingbot_fleet.boot.cmdline`. A grubenv block (RHEL 8) is read as a partial result whose
command line is its ``kernelopts``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..boot.cmdline import parse_cmdline
from . import _grubenv
from ._common import ParseError, partial, require_text, whole

if TYPE_CHECKING:
    from ..boot.grub import GrubFile

KIND = "grub"
EXPECTED = "the content of /etc/default/grub (NAME=value lines) or of a grubenv block"
CMDLINE_VARIABLES = {
    "cmdline_linux": "GRUB_CMDLINE_LINUX",
    "cmdline_linux_default": "GRUB_CMDLINE_LINUX_DEFAULT",
}
GRUBENV_NOTE = (
    "a grubenv block, not /etc/default/grub: cmdline_linux is its kernelopts, the command"
    " line grub2-mkconfig wrote for the boot entries; the GRUB_* variables are not in it"
)

# /etc/default/grub is a few KiB; a value that grows past this through $NAME references
# (A="$A$A" repeated doubles it each line) is refused instead of expanded.
MAX_EXPANDED_CHARS = 64 * 1024

_STATEMENT_START_RE = re.compile(r"\s*(?:export\s+)?[A-Za-z_][A-Za-z0-9_]*=")


def _params(raw: str | None) -> list[dict] | None:
    if raw is None:
        return None
    return [{"name": param.name, "value": param.value} for param in parse_cmdline(raw)]


def _from_grubenv(lines: list[str]) -> dict:
    assignments = _grubenv.assignments(lines)
    variables = {found["name"]: found["value"] for found in assignments}
    return partial(
        {
            "variables": variables,
            "assignments": assignments,
            "unevaluated": [],
            "cmdline_linux": _params(variables.get(_grubenv.KERNELOPTS)),
            "cmdline_linux_default": None,
        },
        GRUBENV_NOTE,
    )


def _check_statements(lines: list[str], source: str, grub_file: GrubFile) -> None:
    """Every line is blank, a comment, or part of a ``NAME=value`` assignment."""
    owned: set[int] = set()
    for assignment in grub_file.assignments:
        last = source.count("\n", 0, assignment.value_end) + 1
        owned.update(range(assignment.line + 1, last + 1))
        line_end = source.find("\n", assignment.value_end)
        rest = source[assignment.value_end : len(source) if line_end < 0 else line_end].strip()
        if rest and not rest.startswith(("#", ";")):
            raise ParseError(
                f"{KIND}: line {assignment.line} has {rest!r} after the value of"
                f" {assignment.name}; a value with spaces must be quoted."
            )
    for number, line in enumerate(lines, start=1):
        body = line.strip()
        if not body or body.startswith("#") or number in owned:
            continue
        if not _STATEMENT_START_RE.match(line):
            raise ParseError(
                f"{KIND}: line {number} is not a NAME=value assignment: {body!r};"
                f" expected {EXPECTED}"
            )


def _evaluate(source: str, grub_file: GrubFile) -> tuple[dict[str, str], list[dict], list[dict]]:
    """Final values, every assignment in order, and the final values not evaluated."""
    variables: dict[str, str] = {}
    assignments: list[dict] = []
    unevaluated: dict[str, dict] = {}
    for assignment in grub_file.assignments:
        reason = assignment.problem
        parts: list[str] = []
        for piece in assignment.pieces:
            if piece.ref is None:
                parts.append(piece.text)
            elif piece.ref in unevaluated:
                reason = reason or f"it refers to ${piece.ref}, which is not evaluated"
            else:
                parts.append(variables.get(piece.ref, ""))
        unevaluated.pop(assignment.name, None)
        if reason is None:
            expanded_chars = sum(len(part) for part in parts)
            if expanded_chars > MAX_EXPANDED_CHARS:
                raise ParseError(
                    f"{KIND}: line {assignment.line}: {assignment.name} expands to"
                    f" {expanded_chars} characters, more than {MAX_EXPANDED_CHARS}; its $NAME"
                    " references repeat a value. Set it without referring to itself."
                )
            value = "".join(parts)
        else:
            value = source[assignment.value_start : assignment.value_end]
            unevaluated[assignment.name] = {
                "name": assignment.name,
                "line": assignment.line,
                "reason": reason,
            }
        variables[assignment.name] = value
        assignments.append({"name": assignment.name, "value": value, "line": assignment.line})
    return variables, assignments, list(unevaluated.values())


def parse_grub(text: str) -> dict:
    from ..boot.grub import GrubParseError, parse_grub_file  # noqa: PLC0415  (heavy; only here)

    lines = require_text(text, KIND, EXPECTED)
    if _grubenv.is_grubenv(lines):
        return _from_grubenv(lines)
    source = "\n".join(lines)
    try:
        grub_file = parse_grub_file(KIND, source)
    except GrubParseError as error:
        raise ParseError(
            f"{KIND}: line {error.line}: {error.problem}; {error.fix} in the file."
        ) from None
    _check_statements(lines, source, grub_file)
    variables, assignments, unevaluated = _evaluate(source, grub_file)
    if not any(name.startswith("GRUB_") for name in variables):
        raise ParseError(f"{KIND}: no GRUB_* variable is set; expected {EXPECTED}")
    not_evaluated = {entry["name"] for entry in unevaluated}
    result: dict = {"variables": variables, "assignments": assignments, "unevaluated": unevaluated}
    for key, variable in CMDLINE_VARIABLES.items():
        result[key] = None if variable in not_evaluated else _params(variables.get(variable))
    return whole(result)
