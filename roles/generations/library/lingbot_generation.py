#!/usr/bin/python
"""Ansible module lingbot_generation: record, commit, list and roll back generations."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_generation
short_description: Numbered generations of the files lingbot-fleet changes, and rollback
description:
  - C(record) saves the current state of O(paths) (content, mode, owner, checksum, or
    that the file does not exist) into the run's open generation,
    C(<generations_dir>/pending/<run_id>/). Call it before writing the files. A path
    already recorded in the run keeps its first state. Bookkeeping only, so it never
    reports changed.
  - C(commit) closes the run's generation. Files whose content, mode and owner did not
    change are dropped; when none changed the open generation is removed, else it
    becomes C(<generations_dir>/<n>/) (n = newest + 1) with a manifest holding, per file,
    the state before and after, plus the time, O(ran), the running kernel command line
    and the plan in force (O(plan_path)). Generations left open by runs that did not
    finish are committed first, marked C(complete=false). Only the newest O(keep) are
    kept.
  - C(list) returns every generation's summary; C(show) one generation's manifest.
  - C(rollback) brings the node back to how it was right after generation O(rollback_to)
    (default the one before the newest; 0 is before the first), in one call under the
    node's run lock. Every file a later generation touched gets the state from before the
    earliest of them, byte for byte with mode and owner, or is removed when it did not
    exist; secrets (C(secrets.env)) are never copied into generations and are left as they
    are. Before anything is touched, every manifest must parse, every saved copy must match
    its checksum and every file must be as the newest generation left it (O(force) skips
    only that last check). The files are saved into the run's generation and staged; then
    the units the rollback takes away are stopped and disabled, the files swapped in, and
    the effects run, each noted on the node until it ran - update-grub (Debian family),
    daemon-reload, restart of the services whose files came back (left to the reboot with
    O(reboot_follows)) - and the rollback is committed as a new generation, so it can be
    rolled back in turn. A rollback cut off after its files were swapped in (killed, or a
    command failed) is finished by the next C(rollback) call instead of being undone.
    Returns C(reboot_required) for the restored kernel command line.
version_added: "0.1.0"
author:
  - lingbot-fleet maintainers (!UNKNOWN)
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [record, commit, list, show, rollback]
  generations_dir:
    description: Where generations live on the node.
    type: path
    default: /var/lib/lingbot-fleet/generations
  run_id:
    description:
      - The run's id, a directory name (letters, digits, C(_ - .)); one generation per
        run id. Required by C(record), C(commit) and C(rollback).
    type: str
  paths:
    description: Absolute paths of the files about to be written or removed (C(record)).
    type: list
    elements: str
    default: []
  ran:
    description: What ran, stored in the manifest (playbook, tags, user, ...).
    type: dict
    default: {}
  keep:
    description: How many generations to keep (C(commit), C(rollback)).
    type: int
    default: 20
  plan_path:
    description: The plan in force, stored in the manifest when present.
    type: path
    default: /etc/lingbot/plan.json
  generation:
    description: The generation C(show) returns.
    type: int
  rollback_to:
    description:
      - C(rollback) - the generation to go back to (the node as it was right after it);
        default the one before the newest.
    type: int
  force:
    description:
      - C(rollback) - restore files even when they changed since the newest generation
        wrote them.
    type: bool
    default: false
  live_runs:
    description:
      - The runs this controller still runs (C(generations_live_runs)); a node lock held by
        another run of this controller that is not among them is taken over.
    type: list
    elements: str
  bootloader:
    description: C(rollback) - how the node boots (auto, grub_d, grubby), as kernel_cmdline.
    type: str
    choices: [auto, grub_d, grubby]
    default: auto
  reboot_follows:
    description:
      - C(rollback) - the playbook reboots the node next when the restored kernel command
        line needs it; the services that come back are then left to the boot.
    type: bool
    default: false
  health_retries:
    description: C(rollback) - how often to check that each restarted service is active.
    type: int
    default: 10
  health_delay_s:
    description: C(rollback) - seconds between those checks.
    type: float
    default: 3
  restorable_paths:
    description:
      - C(rollback) - files or directories, besides those the toolkit's roles write, that a
        rollback may restore (the playbook passes generations_record_paths). A generation
        entry for any other path is refused, naming it.
    type: list
    elements: str
    default: []
  root:
    description:
      - Prefix for every node path the module reads or writes, for image builds and
        tests.
    type: path
    default: /
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: none
"""

EXAMPLES = r"""
- name: Record the drop-in before writing it
  lingbot_generation:
    action: record
    run_id: "{{ generations_run_id }}"
    paths: [/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf]

- name: Close this run's generation
  lingbot_generation:
    action: commit
    run_id: "{{ generations_run_id }}"
    ran: {playbook: site.yml}

- name: Roll back to generation 3
  lingbot_generation:
    action: rollback
    run_id: "{{ generations_run_id }}"
    rollback_to: 3
"""

RETURN = r"""
recorded:
  description: C(record) - paths newly recorded (or, in check mode, that would be).
  returned: action is record
  type: list
  elements: str
generation:
  description: C(commit) - the new generation's number, null when nothing changed.
    C(rollback) - the generation recording it.
  returned: action is commit or rollback
  type: int
commit:
  description: Numbers committed, runs discarded, generations pruned.
  returned: action is commit or rollback (not in check mode)
  type: dict
generations:
  description: C(list) - every generation's summary, oldest first.
  returned: action is list
  type: list
  elements: dict
manifest:
  description: C(show) - the generation's manifest.
  returned: action is show
  type: dict
rollback:
  description: C(rollback) - target, undone generations, each file (path, kind, action
    write/remove/none, current and restored state), kept_secrets, grub_changed,
    units_changed, services_to_restart, units_to_stop; null when the call finished an
    interrupted rollback instead.
  returned: action is rollback
  type: dict
files:
  description: Paths written or removed (or that would be in check mode).
  returned: action is rollback
  type: list
  elements: str
effects:
  description: C(rollback) - what followed the restore (bootloader, daemon_reload, restart).
  returned: action is rollback and files were restored
  type: dict
finished_runs:
  description: C(rollback) - interrupted rollbacks of earlier runs this call finished.
  returned: action is rollback
  type: list
  elements: str
reboot_required:
  description: C(rollback) - the restored kernel command line differs from the running one.
  returned: action is rollback
  type: bool
actions:
  description: C(rollback) - what was done (in check mode, what would be), one sentence each.
  returned: action is rollback
  type: list
  elements: str
"""

import os
from collections.abc import Callable
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.node.generations import (
    DEFAULT_GENERATIONS_DIR,
    GenerationError,
    commit,
    list_generations,
    load_generation,
    pending_dir,
    record_before,
)
from ansible.module_utils.lingbot_fleet.node.rollback import (
    RollbackError,
    RollbackRequest,
    roll_back,
)

FindBin = Callable[[str], "str | None"]

ARGUMENT_SPEC: dict[str, Any] = {
    "action": {
        "type": "str",
        "required": True,
        "choices": ["record", "commit", "list", "show", "rollback"],
    },
    "generations_dir": {"type": "path", "default": DEFAULT_GENERATIONS_DIR},
    "run_id": {"type": "str"},
    "paths": {"type": "list", "elements": "str", "default": []},
    "ran": {"type": "dict", "default": {}},
    "keep": {"type": "int", "default": 20},
    "plan_path": {"type": "path", "default": "/etc/lingbot/plan.json"},
    "generation": {"type": "int"},
    "rollback_to": {"type": "int"},
    "force": {"type": "bool", "default": False},
    "live_runs": {"type": "list", "elements": "str"},
    "bootloader": {"type": "str", "choices": ["auto", "grub_d", "grubby"], "default": "auto"},
    "reboot_follows": {"type": "bool", "default": False},
    "health_retries": {"type": "int", "default": 10},
    "health_delay_s": {"type": "float", "default": 3.0},
    "restorable_paths": {"type": "list", "elements": "str", "default": []},
    "root": {"type": "path", "default": "/"},
}
REQUIRED_IF = [
    ("action", "record", ["run_id"]),
    ("action", "commit", ["run_id"]),
    ("action", "rollback", ["run_id"]),
    ("action", "show", ["generation"]),
]

# --- actions ---------------------------------------------------------------------------


def do_record(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    paths = list(params["paths"])
    if check_mode:
        return {"changed": False, "recorded": paths}
    recorded = record_before(params["generations_dir"], params["run_id"], paths, params["root"])
    result: dict[str, Any] = {"changed": False, "recorded": recorded}
    if recorded:
        # The play's last task commits only when some module recorded into this run.
        result["ansible_facts"] = {"lingbot_generation_pending": params["run_id"]}
    return result


def do_commit(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    if check_mode:
        run_dir = pending_dir(params["generations_dir"], params["run_id"], params["root"])
        return {"changed": False, "generation": None, "pending": os.path.isdir(run_dir)}
    result = commit(
        params["generations_dir"],
        params["run_id"],
        params["ran"],
        root=params["root"],
        keep=params["keep"],
        plan_path=params["plan_path"],
    )
    return {
        "changed": bool(result.committed or result.pruned),
        "generation": result.generation,
        "commit": result.to_json(),
    }


def do_rollback(params: dict[str, Any], check_mode: bool, find_bin: FindBin) -> dict[str, Any]:
    request = RollbackRequest(
        generations_dir=params["generations_dir"],
        run_id=params["run_id"],
        root=params["root"],
        target=params["rollback_to"],
        force=params["force"],
        keep=params["keep"],
        plan_path=params["plan_path"],
        ran=params["ran"],
        live_runs=params["live_runs"],
        bootloader=params["bootloader"],
        reboot_follows=params["reboot_follows"],
        health_retries=params["health_retries"],
        health_delay_s=params["health_delay_s"],
        also_restorable=tuple(params["restorable_paths"]),
    )
    return roll_back(request, check_mode=check_mode, find_bin=find_bin)


def run_action(params: dict[str, Any], check_mode: bool, find_bin: FindBin) -> dict[str, Any]:
    action = params["action"]
    generations_dir, root = params["generations_dir"], params["root"]
    if action == "record":
        return do_record(params, check_mode)
    if action == "commit":
        return do_commit(params, check_mode)
    if action == "list":
        return {"changed": False, "generations": list_generations(generations_dir, root)}
    if action == "show":
        generation = load_generation(generations_dir, params["generation"], root)
        return {"changed": False, "manifest": generation.manifest}
    if action == "rollback":
        return do_rollback(params, check_mode, find_bin)
    raise GenerationError(f"unknown action {action}")


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True
    )
    try:
        result = run_action(module.params, module.check_mode, module.get_bin_path)
    except (GenerationError, RollbackError) as error:
        module.fail_json(msg=str(error))
    except OSError as error:
        module.fail_json(
            msg=f"{error.filename or 'a generations file'}: {error.strerror}; check that the "
            "module runs as root (become) and the disk is writable"
        )
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
