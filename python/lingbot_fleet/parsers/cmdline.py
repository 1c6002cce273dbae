"""``/proc/cmdline``: the running kernel's parameters in order, BOOT_IMAGE apart.

Also read, as partial results: the kernel log's ``Kernel command line:`` line (``dmesg``
or ``journalctl -k``, with or without its timestamp) and a grubenv block's
``kernelopts`` (RHEL 8).
"""

from __future__ import annotations

import re

from ..boot.cmdline import parse_word, split_words
from . import _grubenv
from ._common import ParseError, partial, require_text, whole

KIND = "cmdline"
EXPECTED = (
    "the content of /proc/cmdline (one line), a 'Kernel command line:' line of the kernel"
    " log, or a grubenv block with kernelopts"
)
LOG_NOTE = "read from the kernel log's 'Kernel command line:' line, not from /proc/cmdline"
GRUBENV_NOTE = (
    "read from the grubenv's kernelopts, the options boot entries take through"
    " $kernelopts, not from /proc/cmdline: BOOT_IMAGE and options an entry adds itself"
    " are not in it"
)

# "[    0.000000] Kernel command line: ...", "Jan 06 10:00:00 gpu01 kernel: Kernel ..."
_LOG_LINE_RE = re.compile(r"^(?:.*\W)?Kernel command line:(?P<cmdline>.*)$")
_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]+\Z")


def _params(line: str) -> dict:
    words = split_words(line)
    boot_image = None
    params: list[dict[str, str | None]] = []
    init_args: list[str] = []
    for position, word in enumerate(words):
        if word == "--":
            init_args = words[position + 1 :]
            break
        param = parse_word(word)
        if param.name == "BOOT_IMAGE" and boot_image is None:
            boot_image = param.value
            continue
        params.append({"name": param.name, "value": param.value})
    return {"boot_image": boot_image, "params": params, "init_args": init_args}


def _from_grubenv(lines: list[str]) -> dict:
    kernelopts = [
        found["value"]
        for found in _grubenv.assignments(lines)
        if found["name"] == _grubenv.KERNELOPTS
    ]
    if not kernelopts:
        raise ParseError(
            f"{KIND}: the grubenv block has no kernelopts, so it holds no command line;"
            f" expected {EXPECTED}"
        )
    return partial(_params(kernelopts[-1]), GRUBENV_NOTE)


def parse_cmdline(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    if _grubenv.is_grubenv(lines):
        return _from_grubenv(lines)
    lines = [line for line in lines if line.strip()]
    if len(lines) > 1:
        raise ParseError(
            f"{KIND}: the input has {len(lines)} non-empty lines; /proc/cmdline holds one. "
            f"Expected {EXPECTED}."
        )
    logged = _LOG_LINE_RE.match(lines[0].strip())
    if logged:
        return partial(_params(logged.group("cmdline")), LOG_NOTE)
    first = parse_word(split_words(lines[0])[0]).name
    if first.startswith("GRUB_"):
        raise ParseError(
            f"{KIND}: the input sets {first}, a line of /etc/default/grub; parse it as kind"
            f" grub. Expected {EXPECTED}."
        )
    if not _NAME_RE.match(first):
        raise ParseError(
            f"{KIND}: the input starts with {first!r}, which is not a kernel parameter name;"
            f" expected {EXPECTED}"
        )
    return whole(_params(lines[0]))
