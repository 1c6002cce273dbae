"""One validator per kind of value the toolkit puts into a path, a command, a unit or the
boot line.

Each validator takes the value and the name of the variable (or option) it came from, and
returns the value in its checked form or raises ValueError whose text names the variable,
what is wrong and the fix. The policy play and every module or action that uses a value
call the same validator, so a role used from any playbook, with any tags, refuses the same
values with the same message. Standard library only: role modules import it on the node.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from typing import Any

# --- names, ports, addresses and the API key (lingbot_service) -------------------------

# Characters that end a line in a unit file, an environment file or a shell word, or are
# invisible in a review: C0 and C1 controls, DEL, and the Unicode line separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# systemd's strict rule for User=/Group= names (and useradd's portable one).
_POSIX_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,31}")
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
# An API key is one HTTP token: visible ASCII, no blanks (RFC 6750 Bearer credentials).
_API_KEY = re.compile(r"[\x21-\x7e]+")
_LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple | set):
        return "a list"
    return f"a {type(value).__name__}"


def control_character(text: str) -> str | None:
    """The first control or line-separator character of ``text``, as repr shows it."""
    found = _CONTROL.search(text)
    return repr(found.group()) if found else None


def unit_text(value: Any, variable: str) -> str:
    """Text written into a unit line (a comment, an assignment's value): no character that
    could end the line and start a new directive."""
    if not isinstance(value, str):
        value = str(value)
    control = control_character(value)
    if control is not None:
        raise ValueError(
            f"{variable}: {value!r} holds the control character {control}, which would end "
            "the line in a systemd unit and start a new directive; remove it"
        )
    return value


def posix_name(value: Any, variable: str) -> str:
    """A user or group name for User=, Group=, SupplementaryGroups= and useradd."""
    if not isinstance(value, str) or not _POSIX_NAME.fullmatch(value):
        shown = repr(value) if isinstance(value, str) else _kind(value)
        raise ValueError(
            f"{variable}: {shown} is not a user or group name; use letters, digits, '_' and "
            "'-', starting with a letter or '_', at most 32 characters (e.g. lingbot)"
        )
    return value


def unit_path(value: Any, variable: str) -> str:
    """An absolute path written bare into a unit (AssertPathIsDirectory=): one word, no
    control character, no systemd specifier."""
    if not isinstance(value, str) or not value.startswith("/"):
        shown = repr(value) if isinstance(value, str) else _kind(value)
        raise ValueError(f"{variable}: {shown} is not an absolute path; give one, e.g. /srv/model")
    unit_text(value, variable)
    if any(char.isspace() for char in value) or "%" in value:
        raise ValueError(
            f"{variable}: {value!r} holds whitespace or '%', which a unit file splits or "
            "expands; give a path without them"
        )
    return value


def tcp_port(value: Any, variable: str) -> int:
    """A TCP port LingBot can listen on: an integer from 1 to 65535."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        shown = repr(value) if isinstance(value, int | str) else _kind(value)
        raise ValueError(
            f"{variable}: {shown} is not a TCP port; give an integer from 1 to 65535 (with "
            "several instances, the last one's port is base port + instances - 1)"
        )
    return value


def listen_host(value: Any, variable: str) -> str:
    """An address to listen on or connect to: an IP literal or a host name."""
    if isinstance(value, str) and value:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            pass
        else:
            return value
        labels = value[:-1].split(".") if value.endswith(".") else value.split(".")
        if len(value) <= 253 and all(_HOST_LABEL.fullmatch(label) for label in labels):
            return value
    shown = repr(value) if isinstance(value, str) else _kind(value)
    raise ValueError(
        f"{variable}: {shown} is neither an IP address nor a host name; give one, e.g. "
        "127.0.0.1 or 10.0.0.5"
    )


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this node's loopback (127.0.0.0/8, ::1, localhost)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host.lower().rstrip(".") in _LOOPBACK_NAMES


def api_key(value: Any, variable: str) -> str:
    """LINGBOT_API_KEY: a string; empty means no key, otherwise one HTTP token."""
    if not isinstance(value, str):
        raise ValueError(
            f"{variable} is {_kind(value)}, not a string; give the key itself as one string "
            '(from a vault), or "" for none'
        )
    if value and not _API_KEY.fullmatch(value):
        control = control_character(value)
        what = f"the control character {control}" if control else "a blank or non-ASCII text"
        raise ValueError(
            f"{variable} holds {what}; a key is one word of visible ASCII characters (it goes "
            "into an environment file and an HTTP header). Give such a key"
        )
    return value


def service_exposure(listen_host: str, api_key: str, health_host: str) -> None:
    """Refuse LingBot serving beyond the node without a key, and the key sent over plain
    HTTP to an address that is not the node's own listener.

    The readiness check and the warm-up send the key to lingbot_service_health_host; that
    is allowed only for a loopback address or the very address LingBot listens on (a
    node's own address, so the request never leaves the node).
    """
    if not is_loopback_host(listen_host) and not api_key:
        raise ValueError(
            f"lingbot_service_listen_host is {listen_host!r}, which serves LingBot beyond this "
            "node, but lingbot_service_api_key is empty, so anyone who reaches the port could "
            "use it. Set lingbot_service_api_key (kept in a vault), or leave "
            "lingbot_service_listen_host at 127.0.0.1 (the default)"
        )
    if api_key and not is_loopback_host(health_host) and health_host != listen_host:
        raise ValueError(
            f"lingbot_service_health_host is {health_host!r}, neither a loopback address nor "
            f"lingbot_service_listen_host ({listen_host!r}): the readiness check and the "
            "warm-up would send lingbot_service_api_key there over plain HTTP. Set "
            "lingbot_service_health_host to 127.0.0.1, or to the address in "
            "lingbot_service_listen_host"
        )
