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
    (default the one before the newest; 0 is before the first). Every file a later
    generation touched gets the state from before the earliest of them, byte for byte
    with mode and owner, or is removed when it did not exist. Before anything is touched,
    every manifest must parse, every saved copy must match its checksum and every file
    must be as the newest generation left it (O(force) skips only that last check). The
    files are recorded first and the rollback is committed as a new generation, so a
    rollback can be rolled back. Returns what must follow (C(grub_changed),
    C(units_changed), C(services_to_restart)).
  - C(boot_state) compares /proc/cmdline with the default entry of grub.cfg.
  - C(single_gpu) is the emergency fallback for LingBot instances, against the layout
    of the LingBot service role (C(/etc/lingbot/<instance>/config.yaml) and
    C(lingbot@<instance>.service) whose C(ExecStart) carries C(--gpus) in plan order). It
    writes a drop-in C(lingbot@<instance>.service.d/90-lingbot-fleet-single-gpu.conf)
    whose C(ExecStart) runs on the primary GPU only (C(--device gpu:<first>)) without
    C(--peer-access-threshold) or C(--balancer-config), records it in the run's
    generation and returns the services to restart.
version_added: "0.1.0"
author:
  - lingbot-fleet
options:
  action:
    description: What to do.
    type: str
    required: true
    choices: [record, commit, list, show, rollback, boot_state, single_gpu]
  generations_dir:
    description: Where generations live on the node.
    type: path
    default: /var/lib/lingbot-fleet/generations
  run_id:
    description:
      - The run's id, a directory name (letters, digits, C(_ - .)); one generation per
        run id. Required by C(record), C(commit), C(rollback) and C(single_gpu).
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
    description: How many generations to keep (C(commit), C(rollback), C(single_gpu)).
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
  root:
    description:
      - Prefix for every node path the module reads or writes, for image builds and
        tests.
    type: path
    default: /
attributes:
  check_mode:
    support: full
  diff_mode:
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
    C(rollback), C(single_gpu) - the generation recording it.
  returned: action is commit, rollback or single_gpu
  type: int
commit:
  description: Numbers committed, runs discarded, generations pruned.
  returned: action is commit, rollback or single_gpu (not in check mode)
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
    write/remove/none, current and restored state), grub_changed, units_changed,
    services_to_restart.
  returned: action is rollback
  type: dict
files:
  description: Paths written or removed (or that would be in check mode).
  returned: action is rollback or single_gpu
  type: list
  elements: str
services_to_restart:
  description: Services whose files changed and that still exist after the rollback.
  returned: action is rollback or single_gpu
  type: list
  elements: str
units_to_stop:
  description:
    - Services and timers the rollback takes away (their unit file, or a LingBot
      instance's drop-in or config, did not exist in the restored generation).
  returned: action is rollback
  type: list
  elements: str
boot:
  description: C(boot_state) - running, configured, configured_from, reboot_required.
  returned: action is boot_state
  type: dict
"""

import os
import re
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.generations import (
    LINGBOT_UNIT,
    GenerationError,
    apply_rollback,
    boot_state,
    commit,
    list_generations,
    load_generation,
    on_root,
    pending_dir,
    plan_rollback,
    record_before,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "action": {
        "type": "str",
        "required": True,
        "choices": ["record", "commit", "list", "show", "rollback", "boot_state", "single_gpu"],
    },
    "generations_dir": {"type": "path", "default": "/var/lib/lingbot-fleet/generations"},
    "run_id": {"type": "str"},
    "paths": {"type": "list", "elements": "str", "default": []},
    "ran": {"type": "dict", "default": {}},
    "keep": {"type": "int", "default": 20},
    "plan_path": {"type": "path", "default": "/etc/lingbot/plan.json"},
    "generation": {"type": "int"},
    "rollback_to": {"type": "int"},
    "force": {"type": "bool", "default": False},
    "root": {"type": "path", "default": "/"},
}
REQUIRED_IF = [
    ("action", "record", ["run_id"]),
    ("action", "commit", ["run_id"]),
    ("action", "rollback", ["run_id"]),
    ("action", "single_gpu", ["run_id"]),
    ("action", "show", ["generation"]),
]

LINGBOT_DIR = "/etc/lingbot"
UNIT_DIR = "/etc/systemd/system"
SINGLE_GPU_DROPIN = "90-lingbot-fleet-single-gpu.conf"
_GPUS_OPTION = re.compile(r"--gpus(?:=|\s+)(\S+)")
_DROPPED_OPTIONS = re.compile(r"\s+--(?:peer-access-threshold|balancer-config)(?:=|\s+)\S+")


# --- single GPU fallback (depends on the LingBot service role's layout) ---------------


def single_gpu_exec_start(exec_start: str) -> str:
    """The ExecStart command on the primary GPU only, without peer-access options."""
    found = _GPUS_OPTION.search(exec_start)
    if found is None:
        raise GenerationError(
            f"ExecStart {exec_start!r} has no --gpus option, so the primary GPU is unknown; "
            "check the unit the LingBot service role wrote"
        )
    primary = found.group(1).split(",")[0]
    single = exec_start[: found.start()] + f"--device gpu:{primary}" + exec_start[found.end() :]
    return _DROPPED_OPTIONS.sub("", single)


def last_exec_start(texts: list[str]) -> str | None:
    """The ExecStart in force after the unit file and its drop-ins (in that order)."""
    command = None
    for text in texts:
        for line in text.splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and key.strip() == "ExecStart":
                command = value.strip() or None
    return command


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def lingbot_instances(root: str) -> list[str]:
    base = on_root(root, LINGBOT_DIR)
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    return [name for name in names if os.path.isfile(os.path.join(base, name, "config.yaml"))]


def single_gpu_dropins(root: str) -> dict[str, str]:
    """Drop-in path -> content, for every LingBot instance."""
    instances = lingbot_instances(root)
    if not instances:
        raise GenerationError(
            f"no LingBot instance under {LINGBOT_DIR} (no <instance>/config.yaml); the "
            "single-GPU fallback needs the LingBot service role's files"
        )
    dropins = {}
    for instance in instances:
        unit = LINGBOT_UNIT.format(instance=instance)
        dropin_dir = f"{UNIT_DIR}/{unit}.d"
        texts = [_read(on_root(root, f"{UNIT_DIR}/lingbot@.service")) or ""]
        real_dir = on_root(root, dropin_dir)
        if os.path.isdir(real_dir):
            for name in sorted(os.listdir(real_dir)):
                if name.endswith(".conf") and name != SINGLE_GPU_DROPIN:
                    texts.append(_read(os.path.join(real_dir, name)) or "")
        exec_start = last_exec_start(texts)
        if exec_start is None:
            raise GenerationError(
                f"{unit} has no ExecStart in {UNIT_DIR}/lingbot@.service or its drop-ins; "
                "run the LingBot service role first"
            )
        dropins[f"{dropin_dir}/{SINGLE_GPU_DROPIN}"] = (
            "# Managed by lingbot-fleet: emergency single-GPU fallback (primary GPU only,\n"
            "# no peer access). Roll back to leave it: playbooks/rollback.yml.\n"
            "[Service]\nExecStart=\n"
            f"ExecStart={single_gpu_exec_start(exec_start)}\n"
        )
    return dropins


def write_file(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    temp_path = os.path.join(directory, f".{os.path.basename(path)}.lingbot-fleet")
    with open(temp_path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temp_path, 0o644)
    os.replace(temp_path, path)


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


def do_rollback(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    generations_dir, root = params["generations_dir"], params["root"]
    plan = plan_rollback(generations_dir, params["rollback_to"], params["force"], root)
    report = plan.to_json()
    files = [restore.path for restore in plan.to_change]
    result: dict[str, Any] = {
        "changed": bool(files),
        "rollback": report,
        "files": files,
        "services_to_restart": report["services_to_restart"],
        "units_to_stop": report["units_to_stop"],
        "generation": None,
    }
    if check_mode or not files:
        return result
    apply_rollback(plan, generations_dir, params["run_id"], root)
    ran = {**params["ran"], "rollback_to": plan.target, "undone": list(plan.undone)}
    committed = commit(
        generations_dir,
        params["run_id"],
        ran,
        root=root,
        keep=params["keep"],
        plan_path=params["plan_path"],
    )
    result["generation"] = committed.generation
    result["commit"] = committed.to_json()
    return result


def do_single_gpu(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
    root = params["root"]
    dropins = single_gpu_dropins(root)
    changed = [path for path, text in dropins.items() if _read(on_root(root, path)) != text]
    services = sorted(
        LINGBOT_UNIT.format(instance=path.split("@")[1].split(".service")[0]) for path in changed
    )
    result: dict[str, Any] = {
        "changed": bool(changed),
        "files": changed,
        "services_to_restart": services,
        "generation": None,
    }
    if check_mode or not changed:
        return result
    record_before(params["generations_dir"], params["run_id"], changed, root)
    for path in changed:
        write_file(on_root(root, path), dropins[path])
    committed = commit(
        params["generations_dir"],
        params["run_id"],
        {**params["ran"], "lingbot_mode": "single_gpu"},
        root=root,
        keep=params["keep"],
        plan_path=params["plan_path"],
    )
    result["generation"] = committed.generation
    result["commit"] = committed.to_json()
    return result


def run_action(params: dict[str, Any], check_mode: bool) -> dict[str, Any]:
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
        return do_rollback(params, check_mode)
    if action == "boot_state":
        return {"changed": False, "boot": boot_state(root)}
    return do_single_gpu(params, check_mode)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF, supports_check_mode=True
    )
    try:
        result = run_action(module.params, module.check_mode)
    except GenerationError as error:
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
