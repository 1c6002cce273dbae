"""/etc/default/grub and /etc/default/grub.d/*.cfg: parse, evaluate and edit; and what
the next boot gets (grub.cfg, BLS entries, grubenv: ``next_boot``).

Stdlib-only: this module also runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.boot.grub``).

grub-mkconfig sources ``/etc/default/grub`` and then (Debian family)
``/etc/default/grub.d/*.cfg`` in sorted order with ``sh``, and puts
``$GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT`` on the default entry's ``linux``
line. This module evaluates that in pure Python, for the subset of shell that such
files use: assignments (optionally ``export``-ed) with double-quoted, single-quoted
and unquoted parts, ``$NAME`` / ``${NAME}`` references, backslash escapes, comments,
CRLF line ends. Constructs it cannot evaluate safely (command substitution, other
parameter expansions, conditional assignments, sourcing other files) raise
GrubParseError when they affect the kernel command line, and unbalanced quotes always
do.

Every evaluated character remembers the byte of the file it came from, so an edit
removes exactly the characters of an unwanted parameter (and one neighbouring blank)
and leaves every other byte as it was.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..node.rooted import on_root as _on_root
from .bootfiles import BLS_ENTRIES_DIR, BLS_GRUBENV_PATHS, GRUB_CFG_PATHS
from .cmdline import (
    COMMA_LIST_PARAMS,
    CmdlinePolicy,
    KernelParam,
    check_policy,
    effective_words,
    parse_cmdline,
    parse_word,
    render_cmdline,
    satisfies,
    split_words,
    strip_unwanted,
)

CMDLINE_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
# RHEL 9: the arguments kernel-install gives every new kernel's BLS entry.
DROPIN_HEADER = (
    "# Managed by lingbot-fleet (role kernel_cmdline): kernel parameters it adds.\n"
    "# Set them in the inventory (kernel_cmdline_present), not here.\n"
)

_NAME_START = re.compile(r"[A-Za-z_]")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGNMENT = re.compile(r"(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=")
_CMDLINE_ASSIGNMENT = re.compile(r"\bGRUB_CMDLINE_LINUX(?:_DEFAULT)?\+?=")
_VALUE_END = frozenset(" \t\n;&|<>()")
_BLOCK_OPEN = frozenset({"if", "case", "for", "while", "until", "select"})
_BLOCK_CLOSE = frozenset({"fi", "esac", "done", "}"})
_PREFIX_WORDS = frozenset({"then", "else", "do", "{", "!"})
_SOURCE_WORDS = frozenset({".", "source"})


class GrubParseError(ValueError):
    """A grub defaults file that cannot be parsed or evaluated safely."""

    def __init__(self, path: str, line: int, problem: str, fix: str) -> None:
        self.path = path
        self.line = line
        self.problem = problem
        self.fix = fix
        super().__init__(f"{path}:{line}: {problem}. Fix: {fix}.")


class GrubEditError(ValueError):
    """An edit the policy needs that cannot be made safely by rewriting the file."""


@dataclass(frozen=True)
class Piece:
    """Part of an assignment's value: literal text (with each character's file
    offset) or a reference to a variable."""

    text: str = ""
    offsets: tuple[int, ...] = ()
    ref: str | None = None


@dataclass(frozen=True)
class Assignment:
    name: str
    line: int
    value_start: int
    value_end: int
    pieces: tuple[Piece, ...]
    problem: str | None = None
    fix: str | None = None


@dataclass(frozen=True)
class Blocker:
    """A construct that could change the kernel command line in a way this module
    does not evaluate."""

    line: int
    problem: str
    fix: str


@dataclass(frozen=True)
class GrubFile:
    path: str
    text: str
    assignments: tuple[Assignment, ...]
    blockers: tuple[Blocker, ...] = ()

    def line_ending(self) -> str:
        return "\r\n" if "\r\n" in self.text else "\n"


Origin = tuple[int, int]  # (index of the file in the evaluated sequence, offset)


@dataclass(frozen=True)
class Traced:
    """An evaluated value: its text and, per character, where it came from."""

    text: str = ""
    origins: tuple[Origin, ...] = ()

    def __add__(self, other: Traced) -> Traced:
        return Traced(self.text + other.text, self.origins + other.origins)


@dataclass(frozen=True)
class TracedParam:
    param: KernelParam
    origins: tuple[Origin, ...]
    variable: str


@dataclass(frozen=True)
class _Unevaluable:
    path: str
    line: int
    problem: str
    fix: str


class _Scanner:
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.assignments: list[Assignment] = []
        self.blockers: list[Blocker] = []
        self.depth = 0

    def line_of(self, offset: int) -> int:
        return self.text.count("\n", 0, offset) + 1

    def fail(self, offset: int, problem: str, fix: str) -> GrubParseError:
        return GrubParseError(self.path, self.line_of(offset), problem, fix)

    def is_line_end(self, i: int) -> bool:
        text = self.text
        return i >= len(text) or text[i] == "\n" or text.startswith("\r\n", i)

    def scan(self) -> GrubFile:
        nul = self.text.find("\x00")
        if nul >= 0:
            raise self.fail(
                nul,
                "holds a NUL byte (sh stops reading a value there, so grub would get a "
                "different command line than the file shows)",
                "remove the NUL byte",
            )
        i = 0
        while i < len(self.text):
            i = self.statement(i)
        return GrubFile(self.path, self.text, tuple(self.assignments), tuple(self.blockers))

    def skip_blanks(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in " \t":
            i += 1
        return i

    def statement(self, i: int) -> int:  # noqa: PLR0911 - one return per kind of grub statement
        text = self.text
        i = self.skip_blanks(i)
        if i >= len(text):
            return i
        if text[i] == "#":
            end = text.find("\n", i)
            return len(text) if end < 0 else end + 1
        if text[i] in "\n;":
            return i + 1
        if text.startswith("\r\n", i):
            return i + 2
        word_match = re.compile(r"[^\s;]+").match(text, i)
        word = word_match.group(0) if word_match else ""
        if word in _PREFIX_WORDS:
            return i + len(word)
        if word in _BLOCK_CLOSE:
            self.depth = max(0, self.depth - 1)
            return i + len(word)
        match = _ASSIGNMENT.match(text, i)
        if match:
            return self.assignment(i, match)
        if word in _BLOCK_OPEN:
            self.depth += 1
        end, skipped = self.skip_statement(i)
        if word in _SOURCE_WORDS:
            self.blockers.append(
                Blocker(
                    self.line_of(i),
                    f"'{skipped.strip()}' sources another file, which may set the kernel "
                    "command line",
                    "move its settings into this file or into /etc/default/grub.d/*.cfg",
                )
            )
        elif _CMDLINE_ASSIGNMENT.search(skipped):
            self.blockers.append(self.conditional_blocker(i, skipped))
        if skipped.rstrip().endswith("{"):
            self.depth += 1
        return end

    def conditional_blocker(self, i: int, skipped: str) -> Blocker:
        return Blocker(
            self.line_of(i),
            f"the kernel command line is set inside a command ('{skipped.strip()}'), "
            "whose effect depends on run-time conditions",
            "make it a plain assignment on a line of its own",
        )

    def skip_statement(self, i: int) -> tuple[int, str]:
        """Skip to the end of a command (newline or ';' outside quotes)."""
        text = self.text
        start = i
        at_word_start = True
        while i < len(text):
            char = text[i]
            if char in {"\n", ";"}:
                return i + 1, text[start:i]
            if char == "#" and at_word_start:
                end = text.find("\n", i)
                end = len(text) if end < 0 else end
                return end, text[start:i]
            if char == "\\":
                i += 2
            elif char == "'":
                i = self.closing_single(i) + 1
            elif char == '"':
                i = self.skip_double(i)
            elif char == "`":
                i = self.closing_backtick(i) + 1
            else:
                i += 1
            at_word_start = char in " \t"
        return i, text[start:i]

    def closing_single(self, i: int) -> int:
        end = self.text.find("'", i + 1)
        if end < 0:
            raise self.fail(
                i,
                "unbalanced single quote: the quote opened here is never closed",
                "close the quote",
            )
        return end

    def closing_backtick(self, i: int) -> int:
        j = i + 1
        while j < len(self.text):
            if self.text[j] == "\\":
                j += 2
                continue
            if self.text[j] == "`":
                return j
            j += 1
        raise self.fail(
            i,
            "unbalanced backquote: the command substitution opened here is never closed",
            "close it with a backquote",
        )

    def skip_double(self, i: int) -> int:
        """Index after the double-quoted string opening at ``i``."""
        j = i + 1
        while j < len(self.text):
            char = self.text[j]
            if char == "\\":
                j += 2
                continue
            if char == '"':
                return j + 1
            if char == "`":
                j = self.closing_backtick(j) + 1
                continue
            j += 1
        raise self.fail(
            i,
            "unbalanced double quote: the quote opened here is never closed",
            "close the quote",
        )

    def closing_paren(self, i: int) -> int:
        """Index of the ')' matching the '(' at ``i`` (quotes respected)."""
        depth = 0
        j = i
        while j < len(self.text):
            char = self.text[j]
            if char == "\\":
                j += 2
                continue
            if char == "'":
                j = self.closing_single(j) + 1
                continue
            if char == '"':
                j = self.skip_double(j)
                continue
            if char == "(":
                depth += 1
            elif char == ")":
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise self.fail(
            i,
            "unbalanced parenthesis: the '$(' opened here is never closed",
            "close it with ')'",
        )

    def assignment(self, start: int, match: re.Match[str]) -> int:
        name = match.group(1)
        value_start = match.end()
        value = _ValueBuilder()
        i = self.value(value_start, value)
        value_end = i
        problem, fix = value.problem, value.fix
        if problem is None and self.depth > 0:
            problem = (
                "it is assigned inside an if/case/loop block, so its value depends on "
                "run-time conditions"
            )
            fix = "make it a plain assignment outside any block"
        i = self.skip_blanks(i)
        end = i
        if i < len(self.text) and self.text[i] == "#":
            end, _ = self.skip_statement(i)
        elif i < len(self.text) and self.text[i] == ";":
            end = i + 1
        elif not self.is_line_end(i):
            end, rest = self.skip_statement(i)
            if problem is None:
                problem = (
                    f"the assignment is followed by '{rest.strip()}' on the same line "
                    "(a command run with it, or an unquoted value with blanks)"
                )
                fix = "quote the whole value and keep one assignment per line"
            if _CMDLINE_ASSIGNMENT.search(rest):
                self.blockers.append(self.conditional_blocker(i, rest))
        self.assignments.append(
            Assignment(
                name=name,
                line=self.line_of(start),
                value_start=value_start,
                value_end=value_end,
                pieces=value.pieces(),
                problem=problem,
                fix=fix,
            )
        )
        return end

    def value(self, i: int, value: _ValueBuilder) -> int:
        text = self.text
        while i < len(text):
            char = text[i]
            if char in _VALUE_END or (char == "\r" and self.is_line_end(i + 1)):
                return i
            if char == "'":
                end = self.closing_single(i)
                for offset in range(i + 1, end):
                    value.add(text[offset], offset)
                i = end + 1
            elif char == '"':
                i = self.double_quoted(i, value)
            elif char == "\\":
                i = self.escape(i, value, in_double_quotes=False)
            elif char == "$":
                i = self.dollar(i, value)
            elif char == "`":
                i = self.closing_backtick(i) + 1
                value.unsupported(
                    "its value uses command substitution (`...`)",
                    "replace the command substitution with the literal parameters",
                )
            else:
                value.add(char, i)
                i += 1
        return i

    def double_quoted(self, i: int, value: _ValueBuilder) -> int:
        text = self.text
        j = i + 1
        while j < len(text):
            char = text[j]
            if char == '"':
                return j + 1
            if char == "\\":
                j = self.escape(j, value, in_double_quotes=True)
            elif char == "$":
                j = self.dollar(j, value)
            elif char == "`":
                j = self.closing_backtick(j) + 1
                value.unsupported(
                    "its value uses command substitution (`...`)",
                    "replace the command substitution with the literal parameters",
                )
            else:
                value.add(char, j)
                j += 1
        raise self.fail(
            i,
            "unbalanced double quote: the quote opened here is never closed",
            "close the quote",
        )

    def escape(self, i: int, value: _ValueBuilder, *, in_double_quotes: bool) -> int:
        text = self.text
        if i + 1 >= len(text):
            value.add("\\", i)
            return i + 1
        following = text[i + 1]
        if following == "\n":
            return i + 2
        if text.startswith("\r\n", i + 1):
            return i + 3
        if in_double_quotes and following not in '$`"\\':
            value.add("\\", i)
            return i + 1
        value.add(following, i + 1)
        return i + 2

    def dollar(self, i: int, value: _ValueBuilder) -> int:
        text = self.text
        following = text[i + 1] if i + 1 < len(text) else ""
        if following == "(":
            end = self.closing_paren(i + 1)
            value.unsupported(
                f"its value uses command substitution or arithmetic ({text[i : end + 1]})",
                "replace it with the literal parameters",
            )
            return end + 1
        if following == "{":
            end = text.find("}", i + 2)
            if end < 0:
                raise self.fail(
                    i, "unbalanced brace: the '${' opened here is never closed", "close it with '}'"
                )
            inner = text[i + 2 : end]
            if _NAME.fullmatch(inner):
                value.reference(inner)
            else:
                value.unsupported(
                    f"its value uses the parameter expansion ${{{inner}}}",
                    "use a plain $NAME or ${NAME} reference or literal parameters",
                )
            return end + 1
        if following and _NAME_START.match(following):
            match = _NAME.match(text, i + 1)
            assert match is not None
            value.reference(match.group(0))
            return match.end()
        if following and (following.isdigit() or following in "@*#?$!-"):
            value.unsupported(
                f"its value uses the special parameter ${following}",
                "replace it with literal parameters",
            )
            return i + 2
        value.add("$", i)
        return i + 1


@dataclass
class _ValueBuilder:
    parts: list[Piece] = field(default_factory=list)
    chars: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    problem: str | None = None
    fix: str | None = None

    def add(self, char: str, offset: int) -> None:
        self.chars.append(char)
        self.offsets.append(offset)

    def flush(self) -> None:
        if self.chars:
            self.parts.append(Piece(text="".join(self.chars), offsets=tuple(self.offsets)))
            self.chars, self.offsets = [], []

    def reference(self, name: str) -> None:
        self.flush()
        self.parts.append(Piece(ref=name))

    def unsupported(self, problem: str, fix: str) -> None:
        if self.problem is None:
            self.problem, self.fix = problem, fix

    def pieces(self) -> tuple[Piece, ...]:
        self.flush()
        return tuple(self.parts)


def parse_grub_file(path: str, text: str) -> GrubFile:
    """Parse a grub defaults file; ``path`` names it in errors.

    Raises GrubParseError for unbalanced quotes, braces or parentheses: ``sh`` could
    not source such a file at all.
    """
    return _Scanner(path, text).scan()


def evaluate(files: Sequence[GrubFile]) -> dict[str, Traced]:
    """The kernel command-line variables after sourcing ``files`` in order.

    Raises GrubParseError when a value they depend on cannot be evaluated safely.
    """
    env: dict[str, Traced | _Unevaluable] = {}
    for index, grub_file in enumerate(files):
        if grub_file.blockers:
            blocker = grub_file.blockers[0]
            raise GrubParseError(grub_file.path, blocker.line, blocker.problem, blocker.fix)
        for assignment in grub_file.assignments:
            env[assignment.name] = _evaluate_assignment(env, index, grub_file, assignment)
    result: dict[str, Traced] = {}
    for name in CMDLINE_VARS:
        result[name] = _resolve(env, name)
    return result


def _resolve(env: dict[str, Traced | _Unevaluable], name: str) -> Traced:
    value = env.get(name, Traced())
    if isinstance(value, _Unevaluable):
        raise GrubParseError(value.path, value.line, value.problem, value.fix)
    return value


def _evaluate_assignment(
    env: dict[str, Traced | _Unevaluable], index: int, grub_file: GrubFile, assignment: Assignment
) -> Traced | _Unevaluable:
    what = f"{assignment.name} cannot be evaluated safely: "
    if assignment.problem is not None:
        return _Unevaluable(
            grub_file.path, assignment.line, what + assignment.problem, assignment.fix or ""
        )
    value = Traced()
    for piece in assignment.pieces:
        if piece.ref is None:
            value = value + Traced(piece.text, tuple((index, offset) for offset in piece.offsets))
            continue
        referenced = env.get(piece.ref, Traced())
        if isinstance(referenced, _Unevaluable):
            return _Unevaluable(
                grub_file.path,
                assignment.line,
                f"{assignment.name} refers to ${piece.ref}, which cannot be evaluated safely "
                f"({referenced.path}:{referenced.line}: {referenced.problem})",
                referenced.fix,
            )
        value = value + referenced
    return value


def split_traced(value: Traced, variable: str) -> list[TracedParam]:
    """Split an evaluated value into parameters the way the kernel splits words."""
    params: list[TracedParam] = []
    chars: list[str] = []
    origins: list[Origin] = []
    in_quotes = False

    def flush() -> None:
        if chars:
            params.append(TracedParam(parse_word("".join(chars)), tuple(origins), variable))
            chars.clear()
            origins.clear()

    for char, origin in zip(value.text, value.origins, strict=True):
        if char == '"':
            in_quotes = not in_quotes
        if char.isspace() and not in_quotes:
            flush()
            continue
        chars.append(char)
        origins.append(origin)
    flush()
    return params


def trace_configured(files: Sequence[GrubFile]) -> list[TracedParam]:
    """The default entry's parameters (GRUB_CMDLINE_LINUX, then _DEFAULT), traced."""
    values = evaluate(files)
    params: list[TracedParam] = []
    for name in CMDLINE_VARS:
        params.extend(split_traced(values[name], name))
    return params


def configured_params(files: Sequence[GrubFile]) -> list[KernelParam]:
    return [traced.param for traced in trace_configured(files)]


def render_dropin(params: Iterable[KernelParam], line_ending: str = "\n") -> str:
    """The toolkit's drop-in: appends ``params`` to GRUB_CMDLINE_LINUX."""
    rendered = render_cmdline(params)
    text = DROPIN_HEADER + f'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX {rendered}"\n'
    return text.replace("\n", line_ending)


# --- edits -------------------------------------------------------------------------


@dataclass
class _FileEdits:
    deletions: set[int] = field(default_factory=set)
    replacements: dict[tuple[int, int], str] = field(default_factory=dict)
    insertions: dict[int, str] = field(default_factory=dict)

    def apply(self, text: str) -> str:
        out: list[str] = []
        replaced_until = -1
        starts = {start: (end, new) for (start, end), new in self.replacements.items()}
        for offset in range(len(text) + 1):
            if offset in self.insertions:
                out.append(self.insertions[offset])
            if offset == len(text):
                break
            if offset < replaced_until:
                continue
            if offset in starts:
                end, new = starts[offset]
                out.append(new)
                replaced_until = end
                continue
            if offset not in self.deletions:
                out.append(text[offset])
        return "".join(out)


def _unwanted_here(
    param: KernelParam, policy: CmdlinePolicy, present_plain: dict[str, KernelParam]
) -> KernelParam | bool | None:
    """What ``param`` should become: False to keep it, None to drop it, or the
    parameter with its unwanted options removed."""
    stripped = strip_unwanted(param, policy.absent)
    wanted = present_plain.get(param.key)
    if stripped is not None and wanted is not None and stripped.value != wanted.value:
        return None
    if stripped == param:
        return False
    return stripped


def _containing_assignment(grub_file: GrubFile, offset: int) -> Assignment:
    for assignment in grub_file.assignments:
        if assignment.value_start <= offset < assignment.value_end:
            return assignment
    raise AssertionError(f"offset {offset} of {grub_file.path} is in no assignment value")


def _blank_run(text: str, start: int, stop: int, step: int) -> list[int]:
    run: list[int] = []
    i = start
    while (i >= stop if step < 0 else i < stop) and text[i] in " \t":
        run.append(i)
        i += step
    return run


def _plan_removal(
    files: Sequence[GrubFile], traced: TracedParam, edits: dict[int, _FileEdits]
) -> None:
    by_file: dict[int, list[int]] = {}
    for file_index, offset in traced.origins:
        by_file.setdefault(file_index, []).append(offset)
    for file_index, offsets in by_file.items():
        grub_file = files[file_index]
        file_edits = edits.setdefault(file_index, _FileEdits())
        first, last = min(offsets), max(offsets)
        assignment = _containing_assignment(grub_file, first)
        text = grub_file.text
        blanks = _blank_run(text, first - 1, assignment.value_start, -1)
        if not blanks or set(blanks) <= file_edits.deletions:
            blanks = _blank_run(text, last + 1, assignment.value_end, 1)
        file_edits.deletions.update(offsets)
        file_edits.deletions.update(blanks)


def _plan_rewrite(
    files: Sequence[GrubFile], traced: TracedParam, new: KernelParam, edits: dict[int, _FileEdits]
) -> None:
    file_indexes = {file_index for file_index, _ in traced.origins}
    offsets = [offset for _, offset in traced.origins]
    old_text = traced.param.render()
    first_file = next(iter(file_indexes))
    grub_file = files[first_file]
    contiguous = offsets == list(range(offsets[0], offsets[0] + len(offsets)))
    if (
        len(file_indexes) != 1
        or not contiguous
        or grub_file.text[offsets[0] : offsets[-1] + 1] != old_text
    ):
        line = grub_file.text.count("\n", 0, offsets[0]) + 1
        raise GrubEditError(
            f"{grub_file.path}:{line}: kernel parameter {old_text!r} is written with quotes, "
            f"escapes or references, so it cannot be rewritten safely to {new.render()!r}; "
            "write it as one plain word and run again"
        )
    edits.setdefault(first_file, _FileEdits()).replacements[(offsets[0], offsets[-1] + 1)] = (
        new.render()
    )


def plan_removals(files: Sequence[GrubFile], policy: CmdlinePolicy) -> dict[int, str]:
    """New texts (by file index) with the unwanted parameters taken out.

    Unwanted: the policy's absent parameters, and for a present parameter that is
    not a comma list, any occurrence with another value (the kernel honours the last
    one, and GRUB_CMDLINE_LINUX_DEFAULT comes after GRUB_CMDLINE_LINUX).
    """
    present_plain = {
        param.key: param for param in policy.present if param.key not in COMMA_LIST_PARAMS
    }
    edits: dict[int, _FileEdits] = {}
    for traced in trace_configured(files):
        outcome = _unwanted_here(traced.param, policy, present_plain)
        if outcome is False:
            continue
        if outcome is None:
            _plan_removal(files, traced, edits)
        else:
            assert isinstance(outcome, KernelParam)
            _plan_rewrite(files, traced, outcome, edits)
    return {index: file_edits.apply(files[index].text) for index, file_edits in edits.items()}


def _append_to_assignment(grub_file: GrubFile, assignment: Assignment, words: str) -> str:
    text = grub_file.text
    value_raw = text[assignment.value_start : assignment.value_end]
    evaluated = "".join(piece.text if piece.ref is None else "x" for piece in assignment.pieces)
    separator = "" if not evaluated or evaluated[-1].isspace() else " "
    if value_raw.endswith(('"', "'")) and len(value_raw) >= 2:
        insert_at = assignment.value_end - 1
        addition = separator + words
    else:
        insert_at = assignment.value_end
        addition = f'"{separator}{words}"'
    return text[:insert_at] + addition + text[insert_at:]


def add_to_default_grub(grub_file: GrubFile, params: Sequence[KernelParam]) -> str:
    """``grub_file``'s text with ``params`` appended to its last GRUB_CMDLINE_LINUX
    assignment (or a new assignment at the end when it has none)."""
    if not params:
        return grub_file.text
    words = render_cmdline(params)
    candidates = [a for a in grub_file.assignments if a.name == "GRUB_CMDLINE_LINUX"]
    if candidates:
        return _append_to_assignment(grub_file, candidates[-1], words)
    text = grub_file.text
    ending = grub_file.line_ending()
    if text and not text.endswith("\n"):
        text += ending
    return text + f'GRUB_CMDLINE_LINUX="{words}"' + ending


def check_configured(files: Sequence[GrubFile], policy: CmdlinePolicy) -> list[KernelParam]:
    """Parse and evaluate ``files`` and raise GrubEditError unless they satisfy the
    policy; returns the configured parameters."""
    params = configured_params(files)
    report = check_policy(params, policy)
    present_plain = {p.key: p for p in policy.present if p.key not in COMMA_LIST_PARAMS}
    conflicting = [
        p for p in params if p.key in present_plain and p.value != present_plain[p.key].value
    ]
    if report.compliant and not conflicting:
        return params
    problems = [f"missing {p.render()}" for p in report.missing]
    problems += [f"unwanted {p.render()}" for p in report.unwanted]
    problems += [f"conflicting {p.render()}" for p in conflicting]
    raise GrubEditError(
        "the edited grub configuration would still not match the policy ("
        + ", ".join(problems)
        + "); nothing was written. Check where these parameters are set "
        "(another variable, a file this module does not edit) and fix them by hand"
    )


@dataclass(frozen=True)
class GrubPlan:
    """What the grub defaults files should become.

    ``new_texts`` maps a path to its new text, None to delete the file; only paths
    that change are listed. ``configured`` is the default entry's parameters after
    the change.
    """

    new_texts: dict[str, str | None]
    configured: tuple[KernelParam, ...]


def plan_grub_d(
    files: Sequence[GrubFile],
    dropin_path: str,
    policy: CmdlinePolicy,
) -> GrubPlan:
    """Debian family: unwanted parameters are removed wherever they are set, and the
    toolkit's drop-in holds the present parameters that the other files do not already
    set (none: no drop-in).

    ``files`` are in sourcing order (/etc/default/grub, then grub.d/*.cfg sorted) and may
    or may not include ``dropin_path``.
    """
    present = tuple(policy.present)
    others = [f for f in files if f.path != dropin_path]
    old_dropin = next((f for f in files if f.path == dropin_path), None)
    edited = plan_removals(others, policy)
    new_others = [
        parse_grub_file(f.path, edited[i]) if i in edited else f for i, f in enumerate(others)
    ]
    have = configured_params(new_others)
    missing = [wanted for wanted in present if not satisfies(have, wanted)]
    new_files = list(new_others)
    dropin_text = render_dropin(missing) if missing else None
    if dropin_text is not None:
        new_files.append(parse_grub_file(dropin_path, dropin_text))
        new_files.sort(key=lambda f: _sourcing_key(f.path))
    configured = check_configured(new_files, policy)
    new_texts: dict[str, str | None] = {
        before.path: after.text
        for before, after in zip(others, new_others, strict=True)
        if before.text != after.text
    }
    if dropin_text is not None and (old_dropin is None or old_dropin.text != dropin_text):
        new_texts[dropin_path] = dropin_text
    elif dropin_text is None and old_dropin is not None:
        new_texts[dropin_path] = None
    ordered = {path: i for i, path in enumerate(sourcing_order([*new_texts]))}
    return GrubPlan(
        new_texts=dict(sorted(new_texts.items(), key=lambda item: ordered[item[0]])),
        configured=tuple(configured),
    )


def plan_default_grub(grub_file: GrubFile, policy: CmdlinePolicy) -> GrubPlan:
    """RedHat family: /etc/default/grub alone; missing parameters are appended to
    GRUB_CMDLINE_LINUX, unwanted ones removed."""
    edited = plan_removals([grub_file], policy)
    after = parse_grub_file(grub_file.path, edited.get(0, grub_file.text))
    missing = check_policy(configured_params([after]), policy).missing
    if missing:
        after = parse_grub_file(after.path, add_to_default_grub(after, missing))
    configured = check_configured([after], policy)
    new_texts: dict[str, str | None] = {}
    if after.text != grub_file.text:
        new_texts[grub_file.path] = after.text
    return GrubPlan(new_texts=new_texts, configured=tuple(configured))


def _sourcing_key(path: str) -> tuple[int, str]:
    return (0, "") if path.endswith("/default/grub") else (1, path)


def sourcing_order(paths: Iterable[str]) -> list[str]:
    """/etc/default/grub first, then the drop-ins sorted by path."""
    return sorted(paths, key=_sourcing_key)


# --- the next boot: grub.cfg, BLS entries, grubenv ---------------------------------
#
# What the kernel gets at the next boot, read the way grub reads it: the default entry
# (``set default`` with ``saved_entry`` / ``next_entry`` from grubenv, an index, an id,
# a title or a ``>`` path into a submenu; a default that names nothing falls back to the
# first entry), its ``linux`` line (or the BLS entry's ``options``) with grub's
# variables expanded:
#
# * a variable grubenv defines (``load_env`` runs before any entry) takes that value:
#   RHEL's ``$kernelopts`` and ``$tuned_params``;
# * else a variable grub.cfg sets to one value takes it (RHEL 8's fallback kernelopts);
# * else a variable grub.cfg sets to several values is decided by grub's script at boot
#   (Ubuntu's ``$vt_handoff``: ``vt.handoff=7`` or nothing, by video mode). The toolkit
#   does not manage it: it is taken as the running boot took it (the candidate whose words
#   are in /proc/cmdline, else the empty one, else the first), and its words are listed
#   in ``NextBoot.boot_time``, so they never make a reboot pending nor a grub.cfg stale;
# * a variable nobody defines expands to nothing, as in grub.

_LINUX_COMMANDS = frozenset({"linux", "linuxefi", "linux16"})
_GRUB_REFERENCE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_MAX_EXPANSION_DEPTH = 8


@dataclass(frozen=True)
class NextBoot:
    """The default boot entry and what its kernel gets.

    ``args`` are the kernel's words after expansion, without the image (grub passes it
    as ``BOOT_IMAGE=``); None when no default entry could be found. ``boot_time`` are the
    words among them that grub's script decides at boot.
    """

    source: str | None = None
    entry: str | None = None
    kernel: str | None = None
    args: tuple[str, ...] | None = None
    boot_time: tuple[str, ...] = ()


@dataclass(frozen=True)
class MenuEntry:
    title: str
    entry_id: str | None = None
    linux: tuple[str, ...] | None = None  # raw words after 'linux': the image, then args
    children: tuple[MenuEntry, ...] = ()
    is_submenu: bool = False


@dataclass(frozen=True)
class GrubCfg:
    entries: tuple[MenuEntry, ...]
    defaults: tuple[str, ...]  # raw values of 'set default=' outside entries, in order
    variables: dict[str, tuple[str, ...]]  # raw values every 'set NAME=' gives NAME


@dataclass
class _OpenBlock:
    kind: str
    title: str = ""
    entry_id: str | None = None
    linux: tuple[str, ...] | None = None
    children: list[MenuEntry] = field(default_factory=list)


def _grub_statements(line: str) -> list[list[str]]:  # noqa: PLR0912 - a character lexer: one branch per character class
    """A grub script line as statements of raw words (quotes kept, ';' splits)."""
    statements: list[list[str]] = []
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote: str | None = None
    i = 0
    while i < len(line):
        char = line[i]
        if quote is not None:
            current.append(char)
            if char == quote:
                quote = None
            elif char == "\\" and quote == '"' and i + 1 < len(line):
                current.append(line[i + 1])
                i += 1
        elif char in "'\"":
            quote = char
            current.append(char)
            in_word = True
        elif char == "\\" and i + 1 < len(line):
            current += [char, line[i + 1]]
            in_word = True
            i += 1
        elif char.isspace() or char == ";":
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
            if char == ";" and words:
                statements.append(words)
                words = []
        elif char == "#" and not in_word:
            break
        else:
            current.append(char)
            in_word = True
        i += 1
    if in_word:
        words.append("".join(current))
    if words:
        statements.append(words)
    return statements


def _expand_grub_word(raw: str, lookup: Callable[[str], str]) -> tuple[str, set[str]]:  # noqa: PLR0912 - a character lexer: one branch per character class
    """A raw grub word with ``$NAME`` / ``${NAME}`` expanded and quotes removed; returns
    the text and the names it refers to.

    Double quotes that open inside a value (``dyndbg="file x.c +p"``) stay, as the kernel
    needs them to keep the value one word; quotes around a whole word go.
    """
    out: list[str] = []
    names: set[str] = set()
    quote: str | None = None
    keep_closing = False
    i = 0
    while i < len(raw):
        char = raw[i]
        if quote == "'":
            if char == "'":
                quote = None
            else:
                out.append(char)
        elif char == "'" and quote is None:
            quote = "'"
        elif char == '"':
            if quote is None:
                quote = '"'
                keep_closing = "=" in "".join(out)
                if keep_closing:
                    out.append(char)
            else:
                quote = None
                if keep_closing:
                    out.append(char)
        elif char == "\\" and i + 1 < len(raw):
            out.append(raw[i + 1])
            i += 1
        elif char == "$":
            match = _GRUB_REFERENCE.match(raw, i)
            if match is None:
                out.append(char)
            else:
                name = match.group(1) or match.group(2)
                names.add(name)
                out.append(lookup(name))
                i = match.end()
                continue
        else:
            out.append(char)
        i += 1
    return "".join(out), names


def _unquote(raw: str) -> str:
    text, _ = _expand_grub_word(raw.replace("$", "\\$"), lambda name: "")
    return text.replace('"', "")


def _title_and_id(words: Sequence[str]) -> tuple[str, str | None]:
    title = _unquote(words[0]) if words and words[0] != "{" else ""
    entry_id = None
    for index, word in enumerate(words[:-1]):
        if word in ("--id", "$menuentry_id_option", "${menuentry_id_option}"):
            entry_id = _unquote(words[index + 1])
    return title, entry_id


def parse_grub_cfg(text: str) -> GrubCfg:
    """The menu of a grub.cfg (entries, submenus, their linux lines), its ``set default``
    values and every value each variable is set to."""
    top: list[MenuEntry] = []
    stack: list[_OpenBlock] = []
    defaults: list[str] = []
    variables: dict[str, list[str]] = {}
    for line in text.splitlines():
        for words in _grub_statements(line):
            head = words[0]
            if head in ("menuentry", "submenu"):
                title, entry_id = _title_and_id(words[1:])
                stack.append(_OpenBlock(head, title, entry_id))
            elif head == "function":
                stack.append(_OpenBlock("function"))
            elif head == "}":
                if not stack:
                    continue
                block = stack.pop()
                if block.kind not in ("menuentry", "submenu"):
                    continue
                entry = MenuEntry(
                    block.title,
                    block.entry_id,
                    block.linux,
                    tuple(block.children),
                    block.kind == "submenu",
                )
                parent = next((b for b in reversed(stack) if b.kind == "submenu"), None)
                (parent.children if parent is not None else top).append(entry)
            elif head in _LINUX_COMMANDS and len(words) > 1:
                if stack and stack[-1].kind == "menuentry" and stack[-1].linux is None:
                    stack[-1].linux = tuple(words[1:])
            else:
                assignment = words[1] if head == "set" and len(words) > 1 else head
                name, sep, value = assignment.partition("=")
                if not sep or not _NAME.fullmatch(name):
                    continue
                variables.setdefault(name, []).append(value)
                outside = all(b.kind not in ("menuentry", "function") for b in stack)
                if name == "default" and outside:
                    defaults.append(value)
    return GrubCfg(
        tuple(top), tuple(defaults), {name: tuple(values) for name, values in variables.items()}
    )


def read_grubenv(text: str) -> dict[str, str]:
    """The variables of a grub environment block (``grub-editenv`` format)."""
    values: dict[str, str] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key] = value
    return values


class _Variables:
    """grub's variables for one boot: grubenv, then grub.cfg's ``set`` values."""

    def __init__(
        self, env: dict[str, str], cfg: GrubCfg | None, running_words: frozenset[str]
    ) -> None:
        self.env = env
        self.candidates = cfg.variables if cfg is not None else {}
        self.running_words = running_words
        self.boot_time: set[str] = set()

    def value(self, name: str, depth: int = 0) -> str:
        if name in self.env:
            return self.env[name]
        if depth > _MAX_EXPANSION_DEPTH:
            return ""
        raw_values = self.candidates.get(name, ())
        values = list(dict.fromkeys(self._expand(raw, depth + 1) for raw in raw_values))
        if not values:
            return ""
        if len(values) == 1:
            return values[0]
        self.boot_time.add(name)
        matching = [v for v in values if v.split() and set(split_words(v)) <= self.running_words]
        if matching:
            return matching[0]
        return "" if "" in values else values[0]

    def _expand(self, raw: str, depth: int) -> str:
        text, _ = _expand_grub_word(raw, lambda name: self.value(name, depth))
        return text.replace('"', "")

    def expand_args(self, raw_words: Sequence[str]) -> tuple[list[str], list[str]]:
        """The kernel's words from raw grub words, and those grub decides at boot."""
        args: list[str] = []
        boot_time: list[str] = []
        for raw in raw_words:
            before = set(self.boot_time)
            text, names = _expand_grub_word(raw, self.value)
            words = split_words(text)
            args += words
            if names & self.boot_time or self.boot_time - before:
                boot_time += words
        return args, boot_time


class NodeLinkError(ValueError):
    """A path that is a symbolic link the toolkit cannot follow safely."""


_MAX_LINKS = 16


def resolve_node_path(root: str, path: str) -> str:
    """The node path ``path`` stands for once every symbolic link in it is followed, the
    way the node (with ``root`` as its ``/``) follows them: RHEL 8 on UEFI has
    ``/boot/grub2/grubenv -> ../efi/EFI/redhat/grubenv``. A write or a record goes to that
    file, so the link stays a link. A path without links comes back as it is.

    Raises NodeLinkError for a loop, or a link whose target is missing or not a regular
    file (naming the link and the fix).
    """
    parts = [part for part in path.split("/") if part]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        if part == ".":
            continue
        candidate = "/" + "/".join([*done, part])
        real = _on_root(root, candidate)
        if not os.path.islink(real):
            done.append(part)
            continue
        hops += 1
        if hops > _MAX_LINKS:
            raise NodeLinkError(
                f"{path} goes through more than {_MAX_LINKS} symbolic links (a loop at "
                f"{candidate}); point {candidate} at the real file"
            )
        target = os.readlink(real)
        parts = [p for p in target.split("/") if p] + parts
        if target.startswith("/"):
            done = []
    resolved = "/" + "/".join(done)
    if resolved != path and os.path.lexists(_on_root(root, resolved)):
        if not os.path.isfile(_on_root(root, resolved)):
            raise NodeLinkError(
                f"{path} is a symbolic link to {resolved}, which is not a regular file; "
                f"make {resolved} the file {path} should be, or replace the link with it"
            )
    elif resolved != path:
        raise NodeLinkError(
            f"{path} is a symbolic link to {resolved}, which does not exist (is the file "
            f"system holding it, such as the EFI system partition, mounted?); mount it, or "
            f"replace the link with a regular file"
        )
    return resolved


def _read_optional(root: str, path: str) -> str | None:
    try:
        with open(
            _on_root(root, path), encoding="utf-8", errors="surrogateescape", newline=""
        ) as handle:
            return handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _version_key(version: str) -> list[tuple[int, int | str]]:
    return [
        (0, int(chunk)) if chunk.isdigit() else (1, chunk)
        for chunk in re.findall(r"\d+|[^\d]+", version)
    ]


def _bls_entries(root: str) -> list[tuple[str, dict[str, str]]]:
    """(id, fields) of the BLS entries, in the boot menu's order (newest version first)."""
    directory = _on_root(root, BLS_ENTRIES_DIR)
    try:
        names = sorted(name for name in os.listdir(directory) if name.endswith(".conf"))
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries = []
    for name in names:
        fields: dict[str, str] = {}
        for line in (_read_optional(root, f"{BLS_ENTRIES_DIR}/{name}") or "").splitlines():
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                key, _, value = stripped.partition(" ")
                fields.setdefault(key, value.strip())
        entries.append((name[: -len(".conf")], fields))
    entries.sort(key=lambda e: (_version_key(e[1].get("version", "")), e[0]), reverse=True)
    return entries


def read_bls_grubenv(root: str) -> tuple[str | None, str | None]:
    """(node path, text) of the grubenv grub and grubby use with BLS entries (the first
    of BLS_GRUBENV_PATHS that exists, read through a link as grub reads it)."""
    for path in BLS_GRUBENV_PATHS:
        try:
            resolved = resolve_node_path(root, path)
        except NodeLinkError:
            continue
        text = _read_optional(root, resolved)
        if text is not None:
            return path, text
    return None, None


def _default_name(defaults: Sequence[str], env: dict[str, str]) -> str:
    """What ``default`` is at boot: a one-time ``next_entry``, else the last other value."""
    if env.get("next_entry") and any("next_entry" in raw for raw in defaults):
        return env["next_entry"]
    others = [raw for raw in defaults if "next_entry" not in raw]
    if not others:
        return "0"
    value, _ = _expand_grub_word(others[-1], lambda name: env.get(name, ""))
    value = value.replace('"', "")
    return env.get("saved_entry", "") if value == "saved" else value


def _find_entry(entries: Sequence[MenuEntry], name: str) -> MenuEntry | None:
    if name.isdigit():
        index = int(name)
        return entries[index] if index < len(entries) else None
    for entry in entries:
        if entry.entry_id == name:
            return entry
    return next((entry for entry in entries if entry.title == name), None)


def default_menu_entry(cfg: GrubCfg, env: dict[str, str]) -> MenuEntry | None:
    """The entry grub boots without a key press; None when the menu has no entry."""
    if not cfg.entries:
        return None
    name = _default_name(cfg.defaults, env) or "0"
    level: Sequence[MenuEntry] = cfg.entries
    chosen: MenuEntry | None = None
    for part in name.split(">"):
        chosen = _find_entry(level, part)
        if chosen is None:
            break
        level = chosen.children
    if chosen is None:
        chosen = cfg.entries[0]
    while chosen.is_submenu:
        if not chosen.children:
            return None
        chosen = chosen.children[0]
    return chosen


def _default_bls_entry(
    entries: Sequence[tuple[str, dict[str, str]]], name: str
) -> tuple[str, dict[str, str]]:
    """The BLS entry ``default`` names (an id, a title or an index), else the first."""
    for entry in entries:
        if entry[0] == name:
            return entry
    for entry in entries:
        if entry[1].get("title") == name:
            return entry
    index = int(name) if name.isdigit() and int(name) < len(entries) else 0
    return entries[index]


def next_boot(root: str = "/", running: str | None = None) -> NextBoot:
    """What the next boot gives the kernel: the default BLS entry when there are BLS
    entries (RHEL 8/9, grub's blscfg), else grub.cfg's default entry.

    ``running`` is /proc/cmdline (read under ``root`` when not given); it decides the
    variables grub's script sets at boot (see the rules above).
    """
    if running is None:
        running = _read_optional(root, "/proc/cmdline") or ""
    running_words = frozenset(split_words(running))
    cfg_path = next((p for p in GRUB_CFG_PATHS if _read_optional(root, p) is not None), None)
    cfg = parse_grub_cfg(_read_optional(root, cfg_path) or "") if cfg_path else None
    entries = _bls_entries(root)
    if entries:
        env = read_grubenv(read_bls_grubenv(root)[1] or "")
        defaults = cfg.defaults if cfg is not None and cfg.defaults else ("${saved_entry}",)
        entry_id, fields = _default_bls_entry(entries, _default_name(defaults, env))
        variables = _Variables(env, cfg, running_words)
        raw = [w for statement in _grub_statements(fields.get("options", "")) for w in statement]
        args, boot_time = variables.expand_args(raw)
        return NextBoot(
            source=f"{BLS_ENTRIES_DIR}/{entry_id}.conf",
            entry=entry_id,
            kernel=fields.get("linux"),
            args=tuple(args),
            boot_time=tuple(boot_time),
        )
    if cfg is None or cfg_path is None:
        return NextBoot()
    env = read_grubenv(_read_optional(root, cfg_path.rsplit("/", 1)[0] + "/grubenv") or "")
    entry = default_menu_entry(cfg, env)
    if entry is None or not entry.linux:
        return NextBoot(source=cfg_path)
    variables = _Variables(env, cfg, running_words)
    kernel_words, _ = variables.expand_args(entry.linux[:1])
    args, boot_time = variables.expand_args(entry.linux[1:])
    return NextBoot(
        source=cfg_path,
        entry=entry.entry_id or entry.title,
        kernel=kernel_words[0] if kernel_words else None,
        args=tuple(args),
        boot_time=tuple(boot_time),
    )


def reboot_pending(running: str, boot: NextBoot) -> bool | None:
    """Whether the next boot gives the kernel other parameters than the running one has
    (None when the next boot is unknown). Words grub decides at boot do not count."""
    if boot.args is None:
        return None
    ignored = set(boot.boot_time)
    running_words = [w for w in split_words(running) if w not in ignored]
    next_words = [w for w in boot.args if w not in ignored]
    return effective_words(running_words) != effective_words(next_words)


def next_boot_gaps(
    boot: NextBoot, configured: Sequence[KernelParam], policy: CmdlinePolicy
) -> list[str]:
    """How the next boot misses the grub configuration: a configured word it lacks, or a
    parameter the policy wants absent (or missing) in it. Empty when it boots the
    configuration, or when it is unknown.

    Words the next boot has beyond the configured ones are no gap: grub-mkconfig's
    scripts add some (root=, ro, Ubuntu's $vt_handoff, a cloud image's panic=).
    """
    if boot.args is None:
        return []
    have = set(effective_words(boot.args))
    gaps = [
        f"lacks {word}"
        for word in effective_words(param.render() for param in configured)
        if word not in have
    ]
    report = check_policy(parse_cmdline(" ".join(boot.args)), policy)
    gaps += [f"lacks {p.render()}" for p in report.missing if f"lacks {p.render()}" not in gaps]
    gaps += [f"holds {p.render()}" for p in report.unwanted]
    return gaps


def boot_state(root: str = "/") -> dict[str, Any]:
    """The running kernel command line against the one the next boot gets, when readable
    (the form the rollback, the audit and the tests report)."""
    running = (_read_optional(root, "/proc/cmdline") or "").strip()
    boot = next_boot(root, running)
    if boot.args is None:
        return {"running": running, "configured": None, "configured_from": boot.source}
    return {
        "running": running,
        "configured": " ".join(boot.args),
        "configured_from": boot.source,
        "reboot_required": reboot_pending(running, boot),
    }
