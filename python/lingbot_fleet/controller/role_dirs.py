"""Where the toolkit's roles are, found the way Ansible finds a role for a task.

Controller side (action plugins). The roles' argument specs and defaults are read from
their files, and those files are wherever the toolkit is: the roles/ of a checkout (the
roles path of its ansible.cfg, or roles/ next to the playbook), or the roles/ of the
installed collection lingbot.fleet. Asking Ansible's own role lookup, with the task's
collections first, finds the copy the play runs, in either home.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


class RolesNotFoundError(Exception):
    """No role of the toolkit can be found for this task; str() names the search and fix."""


def roles_dir(role: str, loader: Any, collections: Sequence[str] | None) -> Path:
    """The directory holding ``role`` (and the toolkit's other roles) for this task.

    ``loader`` is the task's DataLoader (its basedir is the playbook's directory);
    ``collections`` the task's collection search list (``lingbot.fleet`` in the
    collection's playbooks and roles).
    """
    from ansible.errors import AnsibleError  # noqa: PLC0415 - controller only
    from ansible.playbook.role.definition import RoleDefinition  # noqa: PLC0415

    definition = RoleDefinition(loader=loader, collection_list=list(collections or []))
    try:
        _name, path = definition._load_role_path(role)
    except AnsibleError as error:
        raise RolesNotFoundError(
            f"cannot find the role {role} of lingbot-fleet: {error.message}; run the "
            "collection's playbooks (lingbot.fleet.site), or a checkout's with its ansible.cfg"
        ) from error
    return Path(path).parent
