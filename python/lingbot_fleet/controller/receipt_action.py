"""The controller's side of the receipts (``lingbot_fleet.node.receipts``): the digest an action
plugin hands its module, and the answer it gives from a standing receipt.

One rule for what enters the digest, the same for every answering action
(``digest_options``): every option of the module's argument spec, except

- the options that say which run this is (``RUN_OPTIONS``: the run id, the live runs,
  where generations go, the digest itself), which decide nothing the node holds;
- options marked ``no_log`` (the API key): no value derived from a secret leaves the
  controller or lands on a node. Their effect is covered by the file the module wrote them
  into, which the receipt watches (an edit there moves its signature);
- options that carry node readings (``views``: the GPU facts, the planner's inputs) enter
  through the module's own reduction of them, declared beside its argument spec, so a
  reading that moves what the module decides moves the digest and nothing else does.

The answer is the module's own no-op result, replayed (``receipts.replay``); no action
writes an answer of its own.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..node import receipts
from .ansible_data import plain_data
from .nodeapp import package_digest

PACKAGE_DIR = Path(__file__).resolve().parents[1]


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


# Options that say which run this is; they enter no digest.
RUN_OPTIONS = frozenset(
    {"generation_run_id", "generations_live_runs", "generations_dir", "receipt_digest"}
)
DigestViews = Mapping[str, Callable[[Mapping[str, Any]], Any]]


def digest_options(
    spec: Mapping[str, Mapping[str, Any]],
    params: Mapping[str, Any],
    views: DigestViews | None = None,
) -> dict[str, Any]:
    """The options a receipt's digest covers (the module's doc above): every option of
    ``spec`` but RUN_OPTIONS and no_log ones, a reading option as its view."""
    views = views or {}
    return {
        name: views[name](params) if name in views else params.get(name)
        for name, option in sorted(spec.items())
        if name not in RUN_OPTIONS and not option.get("no_log")
    }


def answer(
    action: Any,
    module: str,
    role: str,
    spec: Mapping[str, Mapping[str, Any]],
    params: Mapping[str, Any],
    *,
    args: dict[str, Any],
    task_vars: Mapping[str, Any],
    views: DigestViews | None = None,
) -> dict[str, Any] | None:
    """Set ``args["receipt_digest"]``; the module's own no-op result when the role's
    receipt stands for these options and this code, else None (the module runs)."""
    receipt = standing_receipt(
        action, module, role, digest_options(spec, params, views), args=args, task_vars=task_vars
    )
    return receipts.replay(receipt) if receipt is not None else None


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
