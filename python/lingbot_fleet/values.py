"""One validator per kind of value the toolkit puts into a path, a command, a unit or the
boot line.

Each validator takes the value and the name of the variable (or option) it came from, and
returns the value in its checked form or raises ValueError whose text names the variable,
what is wrong and the fix. The policy play and every module or action that uses a value
call the same validator, so a role used from any playbook, with any tags, refuses the same
values with the same message. Standard library only: role modules import it on the node.
"""

from __future__ import annotations

import os
import re

_CONTROL = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
# Filesystems that are not storage (kernel views): a tree the toolkit owns never lives
# there, at any depth.
_NEVER_UNDER = ("/proc", "/sys", "/dev")
# The word that marks a directory as the toolkit's.
TOOLKIT_WORD = "lingbot-fleet"
OWNED_DIR_RULE = (
    "a directory the toolkit owns is an absolute, normalized path with a component below "
    "the top level that names the toolkit (holds 'lingbot-fleet'), not under /proc, /sys or /dev, "
    "e.g. /var/lib/lingbot-fleet/generations"
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
