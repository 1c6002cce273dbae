"""Offline parsers for captured command outputs.

Each kind turns the text of one captured output into a JSON-ready dict (schemas in
``docs/parsers.md``). The smi-q, lspci, grub and cmdline kinds also read the parts of
those outputs that people paste; their results say ``partial`` and, when true, carry a
``note`` of what the text lacks. Stdlib-only: the parsers also run on nodes.

    >>> from lingbot_fleet.parsers import parse
    >>> parse("cmdline", "BOOT_IMAGE=/boot/vmlinuz ro quiet")["params"][0]
    {'name': 'ro', 'value': None}
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable

from ._common import ParseError
from .cmdline import parse_cmdline
from .grub import parse_grub
from .lspci import parse_lspci
from .p2p import parse_p2p
from .p2p_bandwidth import parse_p2p_bandwidth
from .smi_q import parse_smi_q
from .topo import parse_topo

__all__ = ["KINDS", "MAX_INPUT_BYTES", "PARSERS", "ParseError", "parse", "read_capture"]

PARSERS: dict[str, Callable[[str], dict]] = {
    "topo": parse_topo,
    "p2p": parse_p2p,
    "smi-q": parse_smi_q,
    "lspci": parse_lspci,
    "p2p-bandwidth": parse_p2p_bandwidth,
    "grub": parse_grub,
    "cmdline": parse_cmdline,
}

KINDS: tuple[str, ...] = tuple(PARSERS)


def parse(kind: str, text: str) -> dict:
    """Parse ``text`` as the output named by ``kind``; ParseError when it is not one."""
    try:
        parser = PARSERS[kind]
    except KeyError:
        raise ParseError(
            f"unknown output kind {kind!r}; choose one of: {', '.join(KINDS)}"
        ) from None
    return parser(text)


# A captured output is at most a few MiB (p2pBandwidthLatencyTest on 64 GPUs: under 1 MiB).
MAX_INPUT_BYTES = 16 * 1024 * 1024


def _file_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def read_capture(path: str) -> str:
    """The text of the regular file ``path``, at most MAX_INPUT_BYTES; ParseError otherwise.

    The file is opened without blocking and checked on the open descriptor, so a FIFO
    (which would wait for a writer), a device (``/dev/zero`` never ends) or a directory is
    refused by what it is, and nothing past the cap is read.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise ParseError(f"cannot read {path}: {error.strerror}") from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        raise ParseError(
            f"{path} is {_file_kind(mode)}, not a regular file; save the command's output to"
            " a file and parse that file"
        )
    with os.fdopen(descriptor, "rb") as handle:
        data = handle.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise ParseError(
            f"{path} is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB, more than any"
            " captured output; parse the output of one command"
        )
    # The line ends a text-mode read gives (universal newlines).
    text = data.decode("utf-8", errors="replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")
