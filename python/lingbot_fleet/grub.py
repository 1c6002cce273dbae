"""/etc/default/grub and /etc/default/grub.d/*.cfg: parse, evaluate and edit.

Stdlib-only: this module also runs on nodes (shipped as
``ansible.module_utils.lingbot_fleet.grub``).

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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .cmdline import (
    COMMA_LIST_PARAMS,
    CmdlinePolicy,
    KernelParam,
    check_policy,
    parse_word,
    render_cmdline,
    strip_unwanted,
)

CMDLINE_VARS = ("GRUB_CMDLINE_LINUX", "GRUB_CMDLINE_LINUX_DEFAULT")
DEFAULT_GRUB_PATH = "/etc/default/grub"
GRUB_D_DIR = "/etc/default/grub.d"
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
        i = 0
        while i < len(self.text):
            i = self.statement(i)
        return GrubFile(self.path, self.text, tuple(self.assignments), tuple(self.blockers))

    def skip_blanks(self, i: int) -> int:
        while i < len(self.text) and self.text[i] in " \t":
            i += 1
        return i

    def statement(self, i: int) -> int:
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
    extra_present: Sequence[KernelParam] = (),
) -> GrubPlan:
    """Debian family: the toolkit's drop-in holds the present parameters; unwanted ones
    are removed wherever they are set.

    ``files`` are in sourcing order (/etc/default/grub, then grub.d/*.cfg sorted) and may
    or may not include ``dropin_path``.
    """
    present = list(policy.present) + list(extra_present)
    ordered = [f for f in files if f.path != dropin_path]
    old_dropin = next((f for f in files if f.path == dropin_path), None)
    dropin_text: str | None = render_dropin(present) if present else None
    if dropin_text is not None:
        ordered.append(parse_grub_file(dropin_path, dropin_text))
        ordered.sort(key=lambda f: _sourcing_key(f.path))
    full_policy = CmdlinePolicy(present=tuple(present), absent=policy.absent)
    edited = plan_removals(ordered, full_policy)
    new_files = [
        parse_grub_file(f.path, edited[i]) if i in edited else f for i, f in enumerate(ordered)
    ]
    configured = check_configured(new_files, full_policy)
    new_texts: dict[str, str | None] = {}
    for before, after in zip(ordered, new_files, strict=True):
        if before.path == dropin_path:
            if old_dropin is None or old_dropin.text != after.text:
                new_texts[dropin_path] = after.text
        elif before.text != after.text:
            new_texts[before.path] = after.text
    if dropin_text is None and old_dropin is not None:
        new_texts[dropin_path] = None
    return GrubPlan(new_texts=new_texts, configured=tuple(configured))


def plan_default_grub(
    grub_file: GrubFile, policy: CmdlinePolicy, extra_present: Sequence[KernelParam] = ()
) -> GrubPlan:
    """RedHat family: /etc/default/grub alone; missing parameters are appended to
    GRUB_CMDLINE_LINUX, unwanted ones removed."""
    present = tuple(policy.present) + tuple(extra_present)
    full_policy = CmdlinePolicy(present=present, absent=policy.absent)
    edited = plan_removals([grub_file], full_policy)
    after = parse_grub_file(grub_file.path, edited.get(0, grub_file.text))
    missing = check_policy(configured_params([after]), full_policy).missing
    if missing:
        after = parse_grub_file(after.path, add_to_default_grub(after, missing))
    configured = check_configured([after], full_policy)
    new_texts: dict[str, str | None] = {}
    if after.text != grub_file.text:
        new_texts[grub_file.path] = after.text
    return GrubPlan(new_texts=new_texts, configured=tuple(configured))


def _sourcing_key(path: str) -> tuple[int, str]:
    return (0, "") if path.endswith("/default/grub") else (1, path)


def sourcing_order(paths: Iterable[str]) -> list[str]:
    """/etc/default/grub first, then the drop-ins sorted by path."""
    return sorted(paths, key=_sourcing_key)
