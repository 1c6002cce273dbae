"""The controller's side of the receipts (``lingbot_fleet.receipts``): the digest an action
plugin hands its module, and the receipt entry it answers from.

A receipt stands for the options a module converged with and for the code that decided what
the node holds: a toolkit upgrade that writes a unit differently must not be answered by a
receipt of the old code. ``receipt_digest`` covers both: the module's options, every source
file of this package and the module's own file. The action computes it here and passes it
to the module as ``receipt_digest``; the module keeps it in the receipt it writes, so the
node never has to compute the controller's view of the code.

Controller only. The package's digest (``nodeapp.package_digest``) is computed once, when
this module is imported: Ansible imports action plugins in its main process, before the
workers fork, so every host's worker inherits it.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import receipts
from .ansible_data import plain_data
from .nodeapp import package_digest

PACKAGE_DIR = Path(__file__).resolve().parent


@functools.cache
def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def module_path(action: Any, name: str) -> str | None:
    """The file Ansible runs for module ``name`` in this action's task; None when not found."""
    found = action._shared_loader_obj.module_loader.find_plugin_with_context(
        name, collection_list=action._task.collections
    )
    return found.plugin_resolved_path if found.resolved else None


def receipt_digest(options: Mapping[str, Any], module_file: str | None) -> str:
    """The digest a receipt keeps: the options, this package's code, the module's file."""
    parts = {
        "options": receipts.options_digest(options),
        "package": package_digest(PACKAGE_DIR),
        "module": file_digest(module_file) if module_file else None,
    }
    return receipts.options_digest(parts)


def standing_receipt(
    action: Any,
    module: str,
    role: str,
    options: Mapping[str, Any],
    *,
    args: dict[str, Any],
    task_vars: Mapping[str, Any],
) -> dict | None:
    """Set ``args["receipt_digest"]`` (``receipt_digest`` of the options and of the code of
    ``module``); the role's receipt document when, as gpu_facts read it this run
    (``ansible_facts.lingbot_receipts``), it stands for that digest, else None."""
    digest = receipt_digest(options, module_path(action, module))
    args["receipt_digest"] = digest
    found = (task_vars.get("ansible_facts") or {}).get(receipts.FACT_NAME) or {}
    entry = plain_data(found.get(role))
    if receipts.unchanged(entry, digest, time.time()) is not None:
        return None
    return entry["receipt"]


def refuse_internal(args: Mapping[str, Any], module: str, names: Sequence[str]) -> None:
    """AnsibleActionFail when the task sets an option only the action sets."""
    from ansible.errors import AnsibleActionFail  # noqa: PLC0415 - controller only

    for name in names:
        if name in args:
            raise AnsibleActionFail(f"{module}: {name} is set by the action plugin")


def execute(action: Any, module: str, args: Mapping[str, Any], task_vars: Any) -> dict:
    """The module's result on the node (its temp directory removed afterwards)."""
    try:
        return action._execute_module(module, module_args=dict(args), task_vars=task_vars)
    finally:
        action._remove_tmp_path(action._connection._shell.tmpdir)
