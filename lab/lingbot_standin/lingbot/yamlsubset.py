"""A small reader for the YAML subset LingBot configuration files use.

Supported: block mappings and block sequences (sequences may sit at the same indent as
their parent key, as PyYAML and Ansible's ``to_nice_yaml`` write them), flow mappings and
flow sequences (also across several lines, so a JSON document reads too), single- and
double-quoted scalars, plain scalars, integers, floats, booleans (``true``/``false``),
null (``null``/``~``/empty) and ``#`` comments.

Refused with the line number: tabs in indentation, anchors, aliases, tags, block scalars
(``|``/``>``), several documents, duplicate keys and anything else this reader cannot
place. The reader returns plain Python values and, beside them, the line of each value (the
line of its key or sequence dash), keyed by its path (a tuple of mapping keys and sequence
indices).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Path = tuple[str | int, ...]

_INT_RE = re.compile(r"[-+]?[0-9]+")
_FLOAT_RE = re.compile(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)([eE][-+]?[0-9]+)?")
_DOUBLE_QUOTE_ESCAPES = {
    "0": "\0",
    "a": "\a",
    "b": "\b",
    "t": "\t",
    "n": "\n",
    "v": "\v",
    "f": "\f",
    "r": "\r",
    "e": "\x1b",
    " ": " ",
    '"': '"',
    "/": "/",
    "\\": "\\",
}


class YamlSubsetError(ValueError):
    """The text is not in the YAML subset this reader understands."""

    def __init__(self, line_number: int, message: str) -> None:
        super().__init__(f"line {line_number}: {message}")
        self.line_number = line_number
        self.message = message


@dataclass
class Document:
    """A parsed document: its value and the line where each value starts."""

    value: object
    line_of: dict[Path, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def _scan(text: str, line_number: int, flow_depth: int = 0) -> tuple[str, int]:
    """Text without its ``# comment`` and the flow-collection depth at its end.

    A quote opens a quoted scalar only where a scalar starts (after ``: ``, ``- ``, ``[``,
    ``{`` or ``,``); inside a plain scalar quotes, brackets and ``#`` without a space
    before it are ordinary characters.
    """
    index = 0
    token_start = True
    depth = flow_depth
    while index < len(text):
        char = text[index]
        following = text[index + 1 : index + 2]
        if char in "\"'" and token_start:
            index += _parse_quoted(text[index:], line_number)[1]
            token_start = False
            continue
        if char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip(), depth
        if char in " \t":
            pass
        elif char in "[{" and (token_start or depth > 0):
            depth += 1
            token_start = True
        elif char in "]}" and depth > 0:
            depth -= 1
            token_start = False
        elif (
            (char == "," and depth > 0)
            or (
                char == ":" and (following in ("", " ", "\t") or (depth > 0 and following in ",]}"))
            )
            or (char == ":" and depth > 0 and text[index - 1 : index] in ('"', "'"))
        ):
            token_start = True
        elif not (char == "-" and token_start and following in ("", " ")):
            token_start = False
        index += 1
    return text.rstrip(), depth


def _logical_lines(text: str) -> list[_Line]:
    lines: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped_left = raw.lstrip(" ")
        if stripped_left.startswith("\t"):
            raise YamlSubsetError(number, "tab in indentation; indent with spaces")
        content = _scan(stripped_left, number)[0]
        if not content:
            continue
        if content in ("---", "..."):
            if lines:
                raise YamlSubsetError(number, "several documents in one file are not supported")
            continue
        lines.append(_Line(number, len(raw) - len(stripped_left), content))
    return lines


def _find_mapping_colon(text: str) -> int:
    """Index of the ``:`` that separates key and value, or -1 when there is none."""
    if text[:1] in "\"'":
        quote = text[0]
        index = 1
        while index < len(text):
            if text[index] == "\\" and quote == '"':
                index += 2
                continue
            if text[index] == quote:
                if quote == "'" and text[index + 1 : index + 2] == "'":
                    index += 2
                    continue
                rest = text[index + 1 :]
                after = rest.lstrip(" ")
                if after.startswith(":") and (len(after) == 1 or after[1] == " "):
                    return index + 1 + (len(rest) - len(after))
                return -1
            index += 1
        return -1
    if text[:1] in "[{":
        return -1
    for index, char in enumerate(text):
        if char == ":" and (index + 1 == len(text) or text[index + 1] == " "):
            return index
    return -1


def _parse_quoted(text: str, line_number: int) -> tuple[str, int]:
    """Parse a quoted scalar at the start of text; return it and the index after it."""
    quote = text[0]
    pieces: list[str] = []
    index = 1
    while index < len(text):
        char = text[index]
        if quote == '"' and char == "\\":
            escape = text[index + 1 : index + 2]
            if escape in _DOUBLE_QUOTE_ESCAPES:
                pieces.append(_DOUBLE_QUOTE_ESCAPES[escape])
                index += 2
                continue
            widths = {"x": 2, "u": 4, "U": 8}
            if escape in widths:
                digits = text[index + 2 : index + 2 + widths[escape]]
                if len(digits) == widths[escape] and all(
                    c in "0123456789abcdefABCDEF" for c in digits
                ):
                    pieces.append(chr(int(digits, 16)))
                    index += 2 + widths[escape]
                    continue
            raise YamlSubsetError(line_number, f"unknown escape \\{escape} in a quoted string")
        if char == quote:
            if quote == "'" and text[index + 1 : index + 2] == "'":
                pieces.append("'")
                index += 2
                continue
            return "".join(pieces), index + 1
        pieces.append(char)
        index += 1
    raise YamlSubsetError(line_number, f"unterminated {quote} quoted string")


def _plain_scalar(text: str, line_number: int) -> object:  # noqa: PLR0911 - one return per YAML core-schema scalar kind
    """Resolve a plain (unquoted) scalar to null, bool, int, float or str."""
    if text[:1] in ("&", "*", "!"):
        kinds = {"&": "anchors", "*": "aliases", "!": "tags"}
        raise YamlSubsetError(line_number, f"{kinds[text[0]]} are not supported: {text!r}")
    if text[:1] in ("|", ">"):
        raise YamlSubsetError(line_number, "block scalars (| or >) are not supported")
    if text[:1] in ("@", "`", "%"):
        raise YamlSubsetError(line_number, f"a plain scalar cannot start with {text[0]!r}")
    if text in ("null", "Null", "NULL", "~"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if _INT_RE.fullmatch(text):
        return int(text)
    if _FLOAT_RE.fullmatch(text):
        return float(text)
    if text.lower() in (".inf", "+.inf", "-.inf", ".nan"):
        return float(text.replace(".", ""))
    return text


def _scalar(text: str, line_number: int) -> object:
    if text[:1] in "\"'":
        value, end = _parse_quoted(text, line_number)
        if text[end:].strip():
            raise YamlSubsetError(line_number, f"unexpected text after quoted string: {text!r}")
        return value
    return _plain_scalar(text, line_number)


class _FlowParser:
    """Flow collections ({...}, [...]) over text that may span several lines."""

    def __init__(self, text: str, line_starts: list[tuple[int, int]]) -> None:
        self.text = text
        self.position = 0
        self._line_starts = line_starts

    def line_number(self) -> int:
        number = self._line_starts[0][1]
        for offset, line_number in self._line_starts:
            if offset <= self.position:
                number = line_number
        return number

    def error(self, message: str) -> YamlSubsetError:
        return YamlSubsetError(self.line_number(), message)

    def skip_spaces(self) -> None:
        while self.position < len(self.text) and self.text[self.position] == " ":
            self.position += 1

    def parse_value(self, path: Path, line_of: dict[Path, int]) -> object:
        self.skip_spaces()
        line_of[path] = self.line_number()
        if self.position >= len(self.text):
            raise self.error("a flow collection ends early")
        char = self.text[self.position]
        if char == "{":
            return self.parse_mapping(path, line_of)
        if char == "[":
            return self.parse_sequence(path, line_of)
        if char in "\"'":
            value, end = _parse_quoted(self.text[self.position :], self.line_number())
            self.position += end
            return value
        start = self.position
        while self.position < len(self.text) and self.text[self.position] not in ",]}":
            if self.text[self.position] == ":" and self.text[
                self.position + 1 : self.position + 2
            ] in (
                " ",
                ",",
                "}",
                "]",
                "",
            ):
                break
            self.position += 1
        token = self.text[start : self.position].strip()
        if not token:
            raise self.error("an empty entry in a flow collection")
        return _plain_scalar(token, self.line_number())

    def parse_mapping(self, path: Path, line_of: dict[Path, int]) -> dict[str, object]:
        self.position += 1
        mapping: dict[str, object] = {}
        self.skip_spaces()
        if self.text[self.position : self.position + 1] == "}":
            self.position += 1
            return mapping
        while True:
            self.skip_spaces()
            key_line = self.line_number()
            key = self.parse_value((*path, "<key>"), {})
            if not isinstance(key, str):
                raise YamlSubsetError(key_line, f"mapping keys must be strings, got {key!r}")
            self.skip_spaces()
            if self.text[self.position : self.position + 1] != ":":
                raise self.error(f"expected ':' after key {key!r} in a flow mapping")
            self.position += 1
            if key in mapping:
                raise YamlSubsetError(key_line, f"duplicate key {key!r}")
            mapping[key] = self.parse_value((*path, key), line_of)
            self.skip_spaces()
            char = self.text[self.position : self.position + 1]
            self.position += 1
            if char == "}":
                return mapping
            if char != ",":
                raise self.error("expected ',' or '}' in a flow mapping")

    def parse_sequence(self, path: Path, line_of: dict[Path, int]) -> list[object]:
        self.position += 1
        sequence: list[object] = []
        self.skip_spaces()
        if self.text[self.position : self.position + 1] == "]":
            self.position += 1
            return sequence
        while True:
            sequence.append(self.parse_value((*path, len(sequence)), line_of))
            self.skip_spaces()
            char = self.text[self.position : self.position + 1]
            self.position += 1
            if char == "]":
                return sequence
            if char != ",":
                raise self.error("expected ',' or ']' in a flow sequence")


class _BlockParser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.index = 0
        self.line_of: dict[Path, int] = {}

    def current(self) -> _Line | None:
        return self.lines[self.index] if self.index < len(self.lines) else None

    def parse_node(self, indent: int, path: Path) -> object:
        line = self.current()
        assert line is not None
        self.line_of.setdefault(path, line.number)
        if line.text == "-" or line.text.startswith("- "):
            return self.parse_sequence(line.indent, path)
        if line.text[:1] in "[{":
            return self.parse_flow(line.text, path)
        if _find_mapping_colon(line.text) >= 0:
            return self.parse_mapping(line.indent, path)
        self.index += 1
        return _scalar(line.text, line.number)

    def parse_flow(self, first_text: str, path: Path) -> object:
        start_line = self.lines[self.index]
        pieces = [first_text]
        line_starts = [(0, start_line.number)]
        depth = _scan(first_text, start_line.number)[1]
        self.index += 1
        while depth > 0:
            line = self.current()
            if line is None:
                raise YamlSubsetError(start_line.number, "flow collection is never closed")
            offset = sum(len(p) + 1 for p in pieces)
            line_starts.append((offset, line.number))
            pieces.append(line.text)
            depth = _scan(line.text, line.number, depth)[1]
            self.index += 1
        parser = _FlowParser(" ".join(pieces), line_starts)
        value = parser.parse_value(path, self.line_of)
        parser.skip_spaces()
        if parser.position != len(parser.text):
            raise parser.error(
                f"unexpected text after a flow collection: {parser.text[parser.position :]!r}"
            )
        return value

    def parse_inline_value(self, text: str, line: _Line, child_indent: int, path: Path) -> object:
        """The value written after ``key:`` or ``- `` on the same line."""
        self.line_of[path] = line.number
        if text[:1] in "[{":
            self.lines[self.index] = _Line(line.number, child_indent, text)
            return self.parse_flow(text, path)
        self.index += 1
        return _scalar(text, line.number)

    def parse_mapping(self, indent: int, path: Path) -> dict[str, object]:
        mapping: dict[str, object] = {}
        while (line := self.current()) is not None and line.indent == indent:
            if line.text == "-" or line.text.startswith("- "):
                raise YamlSubsetError(line.number, "a sequence entry where a mapping key belongs")
            colon = _find_mapping_colon(line.text)
            if colon < 0:
                raise YamlSubsetError(line.number, f"expected 'key: value', got {line.text!r}")
            key_text = line.text[:colon].strip()
            key = _scalar(key_text, line.number)
            if not isinstance(key, str):
                raise YamlSubsetError(
                    line.number, f"mapping keys must be strings, got {key_text!r}"
                )
            if key in mapping:
                raise YamlSubsetError(line.number, f"duplicate key {key!r}")
            rest = line.text[colon + 1 :].strip()
            child_path = (*path, key)
            if rest:
                mapping[key] = self.parse_inline_value(rest, line, indent + 1, child_path)
                continue
            self.index += 1
            self.line_of[child_path] = line.number
            following = self.current()
            if following is not None and (
                following.indent > indent
                or (
                    following.indent == indent
                    and (following.text == "-" or following.text.startswith("- "))
                )
            ):
                mapping[key] = self.parse_node(following.indent, child_path)
            else:
                mapping[key] = None
        self._check_dedent(indent)
        return mapping

    def parse_sequence(self, indent: int, path: Path) -> list[object]:
        sequence: list[object] = []
        while (line := self.current()) is not None and line.indent == indent:
            if not (line.text == "-" or line.text.startswith("- ")):
                break
            child_path = (*path, len(sequence))
            rest = line.text[1:].lstrip(" ")
            if not rest:
                self.index += 1
                self.line_of[child_path] = line.number
                following = self.current()
                if following is not None and following.indent > indent:
                    sequence.append(self.parse_node(following.indent, child_path))
                else:
                    sequence.append(None)
                continue
            child_indent = indent + (len(line.text) - len(rest))
            if _find_mapping_colon(rest) >= 0 or rest == "-" or rest.startswith("- "):
                self.lines[self.index] = _Line(line.number, child_indent, rest)
                sequence.append(self.parse_node(child_indent, child_path))
                continue
            sequence.append(self.parse_inline_value(rest, line, child_indent, child_path))
        return sequence

    def _check_dedent(self, indent: int) -> None:
        line = self.current()
        if line is not None and line.indent > indent:
            raise YamlSubsetError(line.number, "unexpected indentation")


def parse_document(text: str) -> Document:
    """Parse text in the supported subset; raise YamlSubsetError with a line number."""
    lines = _logical_lines(text)
    if not lines:
        return Document(None, {(): 1})
    parser = _BlockParser(lines)
    value = parser.parse_node(lines[0].indent, ())
    leftover = parser.current()
    if leftover is not None:
        raise YamlSubsetError(leftover.number, f"cannot place this line: {leftover.text!r}")
    return Document(value, parser.line_of)
