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

from collections.abc import Callable

from ._common import ParseError
from .cmdline import parse_cmdline
from .grub import parse_grub
from .lspci import parse_lspci
from .p2p import parse_p2p
from .p2p_bandwidth import parse_p2p_bandwidth
from .smi_q import parse_smi_q
from .topo import parse_topo

__all__ = ["KINDS", "PARSERS", "ParseError", "parse"]

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
