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
import os
import re
import stat
from collections.abc import Iterable, Mapping
from typing import Any

from .state_dirs import GENERATIONS_DIR

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


def kind_of(value: Any) -> str:
    """How a message names the type of a value it refuses: "null", "a mapping", "a list"..."""
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
        shown = repr(value) if isinstance(value, str) else kind_of(value)
        raise ValueError(
            f"{variable}: {shown} is not a user or group name; use letters, digits, '_' and "
            "'-', starting with a letter or '_', at most 32 characters (e.g. lingbot)"
        )
    return value


def unit_path(value: Any, variable: str) -> str:
    """An absolute path written bare into a unit (AssertPathIsDirectory=): one word, no
    control character, no systemd specifier."""
    if not isinstance(value, str) or not value.startswith("/"):
        shown = repr(value) if isinstance(value, str) else kind_of(value)
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
        shown = repr(value) if isinstance(value, int | str) else kind_of(value)
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
    shown = repr(value) if isinstance(value, str) else kind_of(value)
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
            f"{variable} is {kind_of(value)}, not a string; give the key itself as one string "
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


# --- file names, commands, kernel parameters, batch sizes, pip requirements ------------


class ValueRefusedError(ValueError):
    """A value refused: ``str()`` is ``"<variable>: <reason and fix>"``, the same text in the
    policy play (``variable`` and ``reason`` become its PolicyProblem) and in the module."""

    def __init__(self, variable: str, reason: str) -> None:
        super().__init__(f"{variable}: {reason}")
        self.variable = variable
        self.reason = reason


FILE_NAME_MAX_CHARS = 64
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
_FILE_NAME_RULE = (
    "give a file name only: letters, digits, '_', '-', '+' and '.', starting with a letter, "
    f"digit or '_', at most {FILE_NAME_MAX_CHARS} characters"
)


def file_name(value: Any, variable: str) -> str:
    """A name of a file the toolkit writes in a directory it picks (no directory part)."""
    if not isinstance(value, str) or not value:
        raise ValueRefusedError(variable, f"{value!r} is not a file name; {_FILE_NAME_RULE}")
    if "/" in value:
        raise ValueRefusedError(
            variable,
            f"{value!r} holds '/', so it would name a file in another directory; "
            + _FILE_NAME_RULE,
        )
    if len(value) > FILE_NAME_MAX_CHARS:
        raise ValueRefusedError(
            variable, f"{value[:20]!r}... is {len(value)} characters long; " + _FILE_NAME_RULE
        )
    if not _FILE_NAME.match(value):
        raise ValueRefusedError(variable, f"{value!r} is not a plain file name; {_FILE_NAME_RULE}")
    return value


COMMAND_MAX_CHARS = 255
_COMMAND_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]*\Z")
_COMMAND_RULE = (
    "give the program alone, as an absolute path (/usr/bin/setpci) or a bare name looked up "
    "on the node's PATH (setpci): letters, digits, '_', '-', '+' and '.' between the '/', "
    "no arguments, no '.' or '..' parts"
)


def command(value: Any, variable: str) -> str:
    """A program the toolkit runs as root: an absolute path or a bare name, nothing else.

    The node-side half (the file exists, is a root-owned executable no one else can write)
    is ``command_file_problem``, which the module runs on the path it will use.
    """
    if not isinstance(value, str) or not value:
        raise ValueRefusedError(variable, f"{value!r} is not a command; {_COMMAND_RULE}")
    if len(value) > COMMAND_MAX_CHARS:
        raise ValueRefusedError(
            variable, f"{value[:20]!r}... is {len(value)} characters long; {_COMMAND_RULE}"
        )
    if any(char.isspace() for char in value):
        raise ValueRefusedError(
            variable,
            f"{value!r} holds whitespace: arguments or a shell command line would run as "
            f"root; {_COMMAND_RULE}",
        )
    parts = value[1:].split("/") if value.startswith("/") else [value]
    if "/" in value and not value.startswith("/"):
        raise ValueRefusedError(variable, f"{value!r} is a relative path; {_COMMAND_RULE}")
    if any(part in ("", ".", "..") or not _COMMAND_NAME.match(part) for part in parts):
        raise ValueRefusedError(variable, f"{value!r} is not a plain program path; {_COMMAND_RULE}")
    return value


def command_file_problem(path: str, variable: str) -> ValueRefusedError | None:
    """Why the program at ``path`` (absolute, on this node) must not run as root, or None.

    Refused: missing, not a regular executable file, owned by another user than root (or
    than the user this runs as), or writable by its group or by others; and so every
    directory above it (once symbolic links are followed, as exec follows them), except
    that a sticky directory such as /tmp may be writable by all (no one else can replace
    what is in it)."""
    real = os.path.realpath(path)
    try:
        info = os.stat(real)
    except OSError as error:
        return ValueRefusedError(
            variable,
            f"{path!r} cannot be run on this node ({error.strerror or error}); install it or "
            "give the path of the installed program",
        )
    if not stat.S_ISREG(info.st_mode) or not info.st_mode & 0o111:
        return ValueRefusedError(
            variable, f"{path!r} is not an executable file on this node; give the program's path"
        )
    owners = {0, os.geteuid()}
    checked = real
    while True:
        info = os.stat(checked)
        sticky_dir = stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX
        if info.st_uid not in owners or (info.st_mode & 0o022 and not sticky_dir):
            what = "is not owned by root" if info.st_uid not in owners else "is writable by "
            if info.st_uid in owners:
                what += "everyone" if info.st_mode & 0o002 else "its group"
            return ValueRefusedError(
                variable,
                f"{path!r} runs as root, but {checked} {what} (mode "
                f"{stat.S_IMODE(info.st_mode):04o}, uid {info.st_uid}), so another user could "
                "replace the program; give a root-owned program in root-owned directories "
                "that only root can write",
            )
        parent = os.path.dirname(checked)
        if parent == checked:
            return None
        checked = parent


# Kernel parameters ---------------------------------------------------------------------

KERNEL_PARAM_NAME_MAX_CHARS = 64
KERNEL_PARAM_VALUE_MAX_CHARS = 256
_KERNEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_KERNEL_VALUE = re.compile(r"[A-Za-z0-9_.,:=+/@-]+\Z")
_KERNEL_RULE = (
    "a parameter is name or name=value; a name is letters, digits, '_', '-' and '.' (at most "
    f"{KERNEL_PARAM_NAME_MAX_CHARS}), a value letters, digits and _ . , : = + / @ - (at most "
    f"{KERNEL_PARAM_VALUE_MAX_CHARS})"
)

# Boot parameters the toolkit refuses unless the operator names them in
# kernel_cmdline_allow_risky_params: each opens a root shell on the console, runs another
# program as init or at boot, changes what the system boots into, changes the root file
# system, or turns the kernel's mandatory access control off. Compared by name, '-' and
# '_' alike (as the kernel compares them), so 'init' also refuses init=/bin/sh.
RISKY_KERNEL_PARAMS: dict[str, str] = {
    **dict.fromkeys(
        ("init", "rdinit", "systemd.run", "rd.systemd.run"),
        "runs another program as root at boot",
    ),
    **dict.fromkeys(
        (
            "rd.break",
            "rd.shell",
            "rd.emergency",
            "systemd.debug_shell",
            "rd.systemd.debug_shell",
            "single",
            "S",
            "s",
            "1",
            "emergency",
            "rescue",
        ),
        "boots into a root shell",
    ),
    **dict.fromkeys(
        (
            "systemd.unit",
            "rd.systemd.unit",
            "systemd.wants",
            "rd.systemd.wants",
            "systemd.mask",
            "rd.systemd.mask",
            "2",
            "3",
            "4",
            "5",
        ),
        "changes what the node boots into",
    ),
    **dict.fromkeys(
        ("root", "rootfstype", "rootflags", "nfsroot", "systemd.volatile"),
        "changes the root file system",
    ),
    **dict.fromkeys(
        ("selinux", "enforcing", "apparmor", "security", "lsm"),
        "changes the kernel's mandatory access control",
    ),
}
# Removing these leaves the kernel without the root file system it boots from.
RISKY_TO_REMOVE = ("root", "rootfstype", "rootflags", "nfsroot")
ALLOW_RISKY_VARIABLE = "kernel_cmdline_allow_risky_params"


def _kernel_key(name: str) -> str:
    return name.replace("-", "_")


def kernel_parameter(
    name: Any,
    value: Any,
    variable: str,
    *,
    allow_risky: Iterable[str] = (),
    removing: bool = False,
) -> str:
    """One kernel parameter to set (or, with ``removing``, to remove): ``name`` with its
    value (None: a bare flag), rendered. Refuses a name or value outside the grammar, and a
    parameter in RISKY_KERNEL_PARAMS (to set) or RISKY_TO_REMOVE (to remove) unless its name
    is in ``allow_risky``."""
    name = str(name)
    shown = name if value is None else f"{name}={value}"
    if len(name) > KERNEL_PARAM_NAME_MAX_CHARS or not _KERNEL_NAME.match(name):
        raise ValueRefusedError(variable, f"{shown!r} has a malformed name; {_KERNEL_RULE}")
    if value is not None:
        text = str(value)
        if len(text) > KERNEL_PARAM_VALUE_MAX_CHARS or not _KERNEL_VALUE.match(text):
            raise ValueRefusedError(variable, f"{shown!r} has a malformed value; {_KERNEL_RULE}")
    key = _kernel_key(name)
    allowed = {_kernel_key(str(item)) for item in allow_risky}
    reason = RISKY_KERNEL_PARAMS.get(key)
    if removing:
        reason = (
            "leaves the kernel without its root file system" if key in RISKY_TO_REMOVE else None
        )
    if reason is not None and key not in allowed:
        verb = "removing it" if removing else "it"
        raise ValueRefusedError(
            variable,
            f"{shown!r}: {verb} {reason}, so the toolkit refuses it. Remove it; or, if the "
            f"node must boot that way, add {name!r} to {ALLOW_RISKY_VARIABLE}",
        )
    return shown


# Batch sizes ---------------------------------------------------------------------------

_COUNT = re.compile(r"-?[0-9]{1,9}\Z")
_PERCENT = re.compile(r"(-?[0-9]{1,9})%\Z")


def batch_size(value: Any, variable: str) -> int | str:
    """A play's batch size (``serial``): a host count of 1 or more, or '1%' to '100%'.

    Ansible runs every host in one batch for 0 or less: refused, as is anything else
    ``serial`` would not read as one batch size."""
    rule = "give a host count of 1 or more, or a percentage from 1% to 100% (e.g. 2 or '25%')"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueRefusedError(variable, f"{value!r} is not a batch size; {rule}")
    text = str(value).strip()
    percent = _PERCENT.match(text)
    if isinstance(value, int) or _COUNT.match(text):
        number, top, kind = int(text), None, "host count"
    elif percent is not None:
        number, top, kind = int(percent.group(1)), 100, "percentage"
    else:
        raise ValueRefusedError(variable, f"{value!r} is not a batch size; {rule}")
    if number < 1 and top is not None:
        raise ValueRefusedError(variable, f"{value!r} is a percentage under 1%; {rule}")
    if number < 1:
        raise ValueRefusedError(
            variable,
            f"{value!r} would put every node in one batch (Ansible's serial runs all hosts at "
            f"once for 0 or less); {rule}",
        )
    if top is not None and number > top:
        raise ValueRefusedError(variable, f"{value!r} is a {kind} over 100%; {rule}")
    return number if top is None else f"{number}%"


# Pip requirements ----------------------------------------------------------------------

PIP_REQUIREMENT_MAX_CHARS = 200
_PIP_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_PIP_CLAUSE = r" *(?:===|~=|==|!=|<=|>=|<|>) *[A-Za-z0-9.*+!_-]+ *"
_PIP_REQUIREMENT = re.compile(rf"{_PIP_NAME}(?:{_PIP_CLAUSE}(?:,{_PIP_CLAUSE})*)?\Z")


def pip_requirement(value: Any, variable: str) -> str:
    """A requirement pip installs as root: a PEP 508 project name with an optional version
    specifier (``nvidia-ml-py>=12.535,<14``); no option, URL, path, extra or marker."""
    rule = (
        "give a project name with an optional version specifier, e.g. "
        "'nvidia-ml-py>=12.535,<14' (no pip options, URLs, paths, extras or markers)"
    )
    if not isinstance(value, str) or len(value) > PIP_REQUIREMENT_MAX_CHARS:
        raise ValueRefusedError(variable, f"{value!r} is not a pip requirement; {rule}")
    if value.startswith("-"):
        raise ValueRefusedError(
            variable,
            f"{value!r} starts with '-', which pip reads as an option (pip runs as root); {rule}",
        )
    if not _PIP_REQUIREMENT.match(value):
        raise ValueRefusedError(variable, f"{value!r} is not a plain pip requirement; {rule}")
    return value


# Filesystems that are not storage (kernel views): a tree the toolkit owns never lives
# there, at any depth.
_NEVER_UNDER = ("/proc", "/sys", "/dev")
# The word that marks a directory as the toolkit's.
TOOLKIT_WORD = "lingbot-fleet"
OWNED_DIR_RULE = (
    "a directory the toolkit owns is an absolute, normalized path with a component below "
    "the top level that names the toolkit (holds 'lingbot-fleet'), not under /proc, /sys or /dev, "
    f"e.g. {GENERATIONS_DIR}"
)


def owned_dir(value: object, variable: str) -> str:
    """A directory the toolkit creates, writes, chmods and prunes (generations, saved
    probes, backups): refused unless some component below the top level names the toolkit
    (``/var/lib/lingbot-fleet/generations``, ``/srv/lingbot-fleet-generations``), so ``/``,
    ``/var/lib``, ``/etc`` or ``/home/alice`` can never be taken over."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{variable}: {value!r} is not a path; {OWNED_DIR_RULE}")
    control = _CONTROL.search(value)
    if control:
        raise ValueError(
            f"{variable}: {value!r} holds the control character {control.group()!r}; "
            f"{OWNED_DIR_RULE}"
        )
    if not value.startswith("/"):
        raise ValueError(f"{variable}: {value!r} is a relative path; {OWNED_DIR_RULE}")
    parts = value.split("/")[1:]
    if ".." in parts or "." in parts or os.path.normpath(value) != value:
        raise ValueError(
            f"{variable}: {value!r} is not normalized ('..', '.', '//' or a trailing '/'); "
            f"{OWNED_DIR_RULE}"
        )
    if any(value == top or value.startswith(top + "/") for top in _NEVER_UNDER):
        raise ValueError(f"{variable}: {value!r} is on a kernel filesystem; {OWNED_DIR_RULE}")
    if not any(TOOLKIT_WORD in part.lower() for part in parts[1:]):
        raise ValueError(
            f"{variable}: {value!r} is not a directory of the toolkit (the toolkit would "
            f"create, chmod and prune there); {OWNED_DIR_RULE}"
        )
    return value
