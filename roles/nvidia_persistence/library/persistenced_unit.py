#!/usr/bin/python
"""Ansible module: read nvidia-persistenced's unit and say whether it disables persistence."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: persistenced_unit
short_description: Read nvidia-persistenced's ExecStart and its fix for --no-persistence-mode
description:
  - Reads the unit file systemd loads for I(unit) (its FragmentPath, drop-ins ignored) and
    returns its effective ExecStart, whether it passes C(--no-persistence-mode), and the
    ExecStart without that flag, for a drop-in that resets ExecStart.
  - Changes nothing.
options:
  unit:
    description: The unit name.
    type: str
    default: nvidia-persistenced.service
  fragment_path:
    description: Read this unit file instead of asking systemctl for the FragmentPath.
    type: path
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - lingbot-fleet
"""

EXAMPLES = r"""
- name: Read the nvidia-persistenced unit
  persistenced_unit:
  register: unit
"""

RETURN = r"""
fragment_path:
  description: The unit file read.
  returned: always
  type: str
exec_start:
  description: The effective ExecStart command line of the unit file (last assignment wins).
  returned: always
  type: str
no_persistence_mode:
  description: Whether ExecStart passes --no-persistence-mode.
  returned: always
  type: bool
fixed_exec_start:
  description: ExecStart without --no-persistence-mode.
  returned: always
  type: str
"""

import shlex

from ansible.module_utils.basic import AnsibleModule

NO_PERSISTENCE_FLAG = "--no-persistence-mode"


def effective_exec_start(unit_text: str) -> str:
    """The [Service] ExecStart a unit file sets: the last assignment after the last reset."""
    command = ""
    section = ""
    for raw in unit_text.splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line
            continue
        if section != "[Service]" or not line.startswith("ExecStart="):
            continue
        command = line.split("=", 1)[1].strip()
    return command


def without_flag(command: str) -> str:
    """The command line without --no-persistence-mode (other arguments kept in order)."""
    return shlex.join(arg for arg in shlex.split(command) if arg != NO_PERSISTENCE_FLAG)


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "default": "nvidia-persistenced.service"},
            "fragment_path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    fragment = module.params["fragment_path"]
    if not fragment:
        systemctl = module.get_bin_path("systemctl", required=True)
        argv = [systemctl, "show", "--property=FragmentPath", "--value", module.params["unit"]]
        rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C"})
        fragment = out.strip()
        if rc != 0 or not fragment:
            module.fail_json(
                msg=(
                    f"unit {module.params['unit']} is not installed (no FragmentPath); install "
                    "the NVIDIA driver's nvidia-persistenced package"
                ),
                rc=rc,
                stdout=out,
                stderr=err,
            )
    try:
        with open(fragment, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        module.fail_json(msg=f"cannot read unit file {fragment}: {error}")
    command = effective_exec_start(text)
    if not command:
        module.fail_json(msg=f"unit file {fragment} has no ExecStart in [Service]")
    module.exit_json(
        changed=False,
        fragment_path=fragment,
        exec_start=command,
        no_persistence_mode=NO_PERSISTENCE_FLAG in shlex.split(command),
        fixed_exec_start=without_flag(command),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
