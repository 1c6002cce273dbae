#!/usr/bin/python
"""Ansible module lingbot_units: the lingbot@.service template and one drop-in per instance."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: lingbot_units
short_description: Write lingbot@.service and its per-instance drop-ins, verified first
description:
  - Writes the template unit C(<unit_dir>/lingbot@.service) and, for every instance of
    the plan, the drop-in C(<unit_dir>/lingbot@<instance>.service.d/<dropin_name>) that
    holds the instance's environment and ExecStart.
  - Before anything lands, the new files are copied into a temporary directory and
    C(systemd-analyze verify) checks every instance there (the template with its
    drop-in). A failure, or any complaint about these files, fails the module and
    nothing is written. Verification runs in check mode too.
  - With O(prune), the drop-in of every other instance is removed (stop those instances
    first).
  - Files are written atomically, C(0644) and owned by root.
options:
  unit_dir:
    description: Where systemd units live.
    type: path
    default: /etc/systemd/system
  template:
    description: The content of C(lingbot@.service).
    type: str
    required: true
  instances:
    description:
      - The plan's instances (C(lingbot_plan.instances)); each drop-in is rendered from
        C(name), C(gpus), C(numa_node), C(environment), C(gpus_argument),
        C(peer_access_threshold_gbytes_per_s) and C(port).
    type: list
    elements: dict
    required: true
  launch:
    description: How LingBot is started, the same for every instance.
    type: dict
    required: true
    options:
      numactl:
        description: The numactl binary.
        type: path
        default: /usr/bin/numactl
      python:
        description: The Python that runs LingBot.
        type: path
        required: true
      entry:
        description: The words after the Python that start LingBot.
        type: list
        elements: str
        default: ["-m", "lingbot"]
      config_dir:
        description: C(<config_dir>/<instance>/config.yaml) is the instance's --config.
        type: path
        default: /etc/lingbot
      model_path:
        description: LingBot's --model-path.
        type: path
        required: true
      extra_args:
        description: Extra words appended to every ExecStart.
        type: list
        elements: str
        default: []
  header:
    description: Comment lines at the top of each drop-in.
    type: str
    default: ""
  dropin_name:
    description: The drop-in's file name.
    type: str
    default: 10-lingbot-fleet-plan.conf
  prune:
    description: Remove this drop-in from instances not in O(instances).
    type: bool
    default: true
  verify:
    description: Run C(systemd-analyze verify) before writing.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Write the LingBot units
  lingbot_units:
    template: "{{ lookup('ansible.builtin.template', 'lingbot@.service.j2') }}"
    instances: "{{ lingbot_plan.instances }}"
    launch:
      python: /usr/bin/python3
      model_path: /var/lib/lingbot/model
"""

RETURN = r"""
template_changed:
  description: Whether lingbot@.service changed (or would).
  returned: success
  type: bool
changed_instances:
  description: Instances whose drop-in changed (or would), sorted.
  returned: success
  type: list
  elements: str
removed_instances:
  description: Instances whose drop-in was (or would be) removed, sorted.
  returned: success
  type: list
  elements: str
verify_output:
  description: What systemd-analyze verify said, when it failed.
  returned: failure
  type: str
"""

import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

TEMPLATE_NAME = "lingbot@.service"
INSTANCE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DROPIN_DIR_RE = re.compile(r"lingbot@(.+)\.service\.d")


def unit_name(instance: str) -> str:
    return f"lingbot@{instance}.service"


def systemd_word(word: str) -> str:
    """One word of a unit's command line or assignment, as systemd reads it back."""
    if word == "" or re.search(r"[\s\"'\\;]", word):
        word = '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return word.replace("%", "%%").replace("$", "$$")


def threshold_text(gbytes_per_s: float) -> str:
    return f"{gbytes_per_s:g}"


def exec_start_argv(instance: dict, launch: dict) -> list[str]:
    """numactl-bound LingBot command line of one plan instance (shared/LINGBOT.md)."""
    node = str(instance["numa_node"])
    return [
        launch["numactl"],
        f"--cpunodebind={node}",
        f"--membind={node}",
        launch["python"],
        *launch["entry"],
        "--config",
        os.path.join(launch["config_dir"], instance["name"], "config.yaml"),
        "--model-path",
        launch["model_path"],
        "--gpus",
        instance["gpus_argument"],
        "--peer-access-threshold",
        threshold_text(instance["peer_access_threshold_gbytes_per_s"]),
        "--port",
        str(instance["port"]),
        *launch["extra_args"],
    ]


def dropin_text(instance: dict, launch: dict, header: str) -> str:
    gpus = ", ".join(str(gpu) for gpu in instance["gpus"])
    lines = [
        *header.splitlines(),
        f"# Instance {instance['name']} of the plan (/etc/lingbot/plan.json): GPU {gpus} "
        f"(NVML indices, primary first) on NUMA node {instance['numa_node']}.",
        f"# CUDA_VISIBLE_DEVICES lists their UUIDs in that order, so --gpus "
        f"{instance['gpus_argument']} keeps it.",
        "[Service]",
    ]
    environment = instance["environment"]
    for key in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES"):
        lines.append("Environment=" + systemd_word(f"{key}={environment[key]}"))
    lines.append("ExecStart=")
    argv = exec_start_argv(instance, launch)
    lines.append("ExecStart=" + " ".join(systemd_word(word) for word in argv))
    return "\n".join(lines) + "\n"


def instance_names(params: dict) -> list[str]:
    return [instance["name"] for instance in params["instances"]]


def desired_files(params: dict) -> dict[str, str]:
    """Path relative to unit_dir -> content."""
    files = {TEMPLATE_NAME: params["template"]}
    for instance in sorted(params["instances"], key=lambda item: item["name"]):
        text = dropin_text(instance, params["launch"], params["header"])
        files[f"{unit_name(instance['name'])}.d/{params['dropin_name']}"] = text
    return files


def read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def stale_dropins(unit_dir: str, instances: list[str], dropin_name: str) -> dict[str, str]:
    """Instance -> drop-in path, for instances that have the drop-in but are not planned."""
    stale = {}
    try:
        names = sorted(os.listdir(unit_dir))
    except FileNotFoundError:
        return {}
    for name in names:
        match = DROPIN_DIR_RE.fullmatch(name)
        if match is None or match.group(1) in instances:
            continue
        path = os.path.join(unit_dir, name, dropin_name)
        if os.path.isfile(path):
            stale[match.group(1)] = path
    return stale


def verify(module: AnsibleModule, files: dict[str, str], instances: list[str]) -> None:
    """systemd-analyze verify every instance in a private copy; fail on any complaint."""
    analyze = module.get_bin_path("systemd-analyze", required=True)
    workdir = tempfile.mkdtemp(prefix="lingbot-units.")
    try:
        for relative, text in files.items():
            path = os.path.join(workdir, relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        argv = [analyze, "verify", *(os.path.join(workdir, unit_name(i)) for i in instances)]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        output = (out + err).replace(workdir + "/", "")
        ours = [line for line in (out + err).splitlines() if workdir in line or "lingbot@" in line]
        if rc != 0 or ours:
            module.fail_json(
                msg="systemd-analyze verify refused the LingBot units; nothing was written:\n"
                + output.strip(),
                rc=rc,
                verify_output=output,
            )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def write_atomic(module: AnsibleModule, path: str, text: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, temp_path = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temp_path, 0o644)
        os.chown(temp_path, 0, 0)
    except BaseException:
        os.unlink(temp_path)
        raise
    module.atomic_move(temp_path, path)


def remove_dropin(path: str) -> None:
    os.unlink(path)
    directory = os.path.dirname(path)
    if not os.listdir(directory):
        os.rmdir(directory)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit_dir": {"type": "path", "default": "/etc/systemd/system"},
            "template": {"type": "str", "required": True},
            "instances": {"type": "list", "elements": "dict", "required": True},
            "launch": {
                "type": "dict",
                "required": True,
                "options": {
                    "numactl": {"type": "path", "default": "/usr/bin/numactl"},
                    "python": {"type": "path", "required": True},
                    "entry": {"type": "list", "elements": "str", "default": ["-m", "lingbot"]},
                    "config_dir": {"type": "path", "default": "/etc/lingbot"},
                    "model_path": {"type": "path", "required": True},
                    "extra_args": {"type": "list", "elements": "str", "default": []},
                },
            },
            "header": {"type": "str", "default": ""},
            "dropin_name": {"type": "str", "default": "10-lingbot-fleet-plan.conf"},
            "prune": {"type": "bool", "default": True},
            "verify": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    names = instance_names(params)
    bad = sorted(name for name in names if not INSTANCE_RE.fullmatch(name))
    if bad:
        module.fail_json(
            msg=f"instance name {bad[0]!r} cannot be a systemd instance; use letters, digits, "
            "'_', '.', '-' (at most 64)"
        )
    unit_dir = params["unit_dir"]
    files = desired_files(params)
    changes = {
        relative: (read_text(os.path.join(unit_dir, relative)), text)
        for relative, text in files.items()
    }
    changes = {relative: pair for relative, pair in changes.items() if pair[0] != pair[1]}
    stale = stale_dropins(unit_dir, names, params["dropin_name"]) if params["prune"] else {}
    if changes and params["verify"]:
        verify(module, files, sorted(names))
    diffs = [
        {
            "before_header": os.path.join(unit_dir, relative),
            "after_header": os.path.join(unit_dir, relative),
            "before": before or "",
            "after": after,
        }
        for relative, (before, after) in changes.items()
    ]
    diffs += [
        {"before_header": path, "after_header": path, "before": read_text(path) or "", "after": ""}
        for path in stale.values()
    ]
    if not module.check_mode:
        for relative, (_, text) in changes.items():
            write_atomic(module, os.path.join(unit_dir, relative), text)
        for path in stale.values():
            remove_dropin(path)
    changed_instances = sorted(
        instance
        for instance in names
        if f"{unit_name(instance)}.d/{params['dropin_name']}" in changes
    )
    module.exit_json(
        changed=bool(changes or stale),
        template_changed=TEMPLATE_NAME in changes,
        changed_instances=changed_instances,
        removed_instances=sorted(stale),
        diff=diffs,
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
