"""How a word is written into a systemd unit so that systemd reads it back unchanged.

Stdlib-only (used on nodes by the modules that write units). One place for the quoting
of ExecStart= and Environment= words: quotes around words with blanks, quotes,
backslashes or ';', '%' and '$' doubled so that systemd expands nothing. A word with a
control character (a newline above all, which would end the line inside the quotes and
start a new directive) has no safe form and is refused.
"""

from __future__ import annotations

import re


class SystemdTextError(ValueError):
    """Text that is not a unit's words as ``systemd_word`` writes them."""


_NEEDS_QUOTES = re.compile(r"[\s\"'\\;]")
# C0 and C1 controls, DEL and the Unicode line separators: none may stand in a unit line.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def systemd_word(word: str) -> str:
    """One word of a unit's command line or assignment, as systemd reads it back.

    Raises SystemdTextError for a word holding a control character (newline, tab, ...).
    """
    control = _CONTROL.search(word)
    if control:
        raise SystemdTextError(
            f"{word!r} holds the control character {control.group()!r}, which would end the "
            "line in a systemd unit and start a new directive; remove it"
        )
    if word == "" or _NEEDS_QUOTES.search(word):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word.replace("%", "%%").replace("$", "$$")


def split_systemd_words(text: str) -> list[str]:
    """The words of an ExecStart value, as ``systemd_word`` wrote them (quotes, %%, $$)."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and quote != "'" and index + 1 < len(text):
            current.append(text[index + 1])
            in_word = True
            index += 2
            continue
        if quote:
            if char == quote:
                quote = ""
            else:
                current.append(char)
        elif char in "\"'":
            quote = char
            in_word = True
        elif char.isspace():
            if in_word:
                words.append("".join(current))
                current, in_word = [], False
        else:
            current.append(char)
            in_word = True
        index += 1
    if quote:
        raise SystemdTextError(f"unbalanced {quote} in ExecStart {text!r}")
    if in_word:
        words.append("".join(current))
    return [word.replace("%%", "%").replace("$$", "$") for word in words]
