#!/usr/bin/python
"""Ansible module topo_monitor_install: the path monitor's program, config, units, timer."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: topo_monitor_install
short_description: Install the path monitor (one zipapp), its configuration and its timer
description:
  - Installs what the path monitor needs on a node in one call, and touches nothing that
    is already right.
  - The program is one zipapp built on the controller by the action plugin of the same
    name (C(lingbot_fleet.controller.nodeapp)), installed at O(app_path) (C(0755)). The module
    compares the file's sha256 with O(app_checksum); when they differ and O(app_src) is
    not given, it writes nothing and returns RV(app_upload_required), and the action
    plugin uploads the archive and runs it again with O(app_src).
  - The configuration O(config) is written as JSON to O(config_path) after the monitor's
    own check (C(lingbot_fleet.monitor.config), what C(--check-config) runs) accepts it.
  - C(lingbot-fleet-monitor.service) and C(lingbot-fleet-monitor.timer) are rendered
    from the options (C(lingbot_fleet.monitor.units)), every value quoted as systemd reads
    it, and checked with C(systemd-analyze verify) in a private directory before
    anything lands; a failure or any complaint about them fails the module and nothing is
    written. Verification runs in check mode too.
  - Creates the configuration, state and textfile directories (C(0755), root).
    Removes O(obsolete_paths) (a directory with everything in it).
  - Every file is saved into the run's generation before it changes (O(generation_run_id)),
    under the node's run lock, written atomically and owned by root.
  - Runs C(systemctl daemon-reload) when a unit changed, enables and starts the timer, and
    restarts it when the timer unit changed.
extends_documentation_fragment:
  - lingbot_generation
  - lingbot_receipt
options:
  app_path:
    description: Where the zipapp goes; also the command operators run.
    type: path
    default: /usr/local/sbin/lingbot-fleet-monitor
  app_checksum:
    description: sha256 of the zipapp (set by the action plugin).
    type: str
    required: true
  app_src:
    description: The uploaded zipapp on the node (set by the action plugin).
    type: path
  python:
    description: The Python 3 that runs the zipapp (ExecStart, and the archive's C(#!) line).
    type: path
    required: true
  config_path:
    description: The monitor's configuration file.
    type: path
    default: /etc/lingbot-fleet/monitor.json
  config:
    description:
      - The configuration (keys of C(lingbot_fleet.monitor.config.MonitorConfig)). Its
        C(state_dir) and C(textfile_dir) are the directories the service may write.
    type: dict
    required: true
  unit_dir:
    description: Where the two units go.
    type: path
    default: /etc/systemd/system
  timeout_s:
    description: TimeoutStartSec= of a run, seconds (at least 1).
    type: int
    default: 120
  nice:
    description: Nice= of a run (-20..19).
    type: int
    default: 10
  extra_writable_paths:
    description: More ReadWritePaths= of the service, each ignored when missing.
    type: list
    elements: path
    default: []
  interval:
    description: OnUnitActiveSec= of the timer (systemd time span).
    type: str
    default: 5min
  boot_delay:
    description: OnBootSec= of the timer.
    type: str
    default: 2min
  randomized_delay:
    description: RandomizedDelaySec= of the timer.
    type: str
    default: 30s
  header:
    description: Comment lines at the top of both units.
    type: str
    default: ""
  verify:
    description: Check both units with C(systemd-analyze verify) before writing them.
    type: bool
    default: true
  obsolete_paths:
    description:
      - Files or directories earlier versions installed; removed (saved into the
        generation first) when present.
    type: list
    elements: path
    default: []
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
    details: Nothing is uploaded; a new zipapp is reported by its checksum.
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: full
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Install the path monitor
  topo_monitor_install:
    python: /usr/bin/python3
    config:
      plan_path: /etc/lingbot/plan.json
      state_dir: /var/lib/lingbot-fleet/monitor
      textfile_dir: /var/lib/prometheus/node-exporter
    header: "# Ansible managed"
    generation_run_id: "{{ generations_run_id }}"
"""

RETURN = r"""
app_upload_required:
  description:
    - True when the zipapp on the node differs and O(app_src) was not given; nothing
      was written. The action plugin answers it.
  returned: success
  type: bool
files:
  description: Every file the module manages (program, configuration, both units).
  returned: success
  type: list
  elements: str
changed_paths:
  description: The files and directories that changed (or would), in order.
  returned: success
  type: list
  elements: str
actions:
  description: What was done (or would be, in check mode), one sentence each.
  returned: success
  type: list
  elements: str
receipt:
  description:
    - The receipt of what was verified (C(/var/lib/lingbot-fleet/receipts/topo_monitor.json),
      see C(lingbot_fleet.node.receipts)) - C(written), C(unchanged), C(not written) with the
      reason, or C(stands) when the action plugin answered from it without a module call.
  returned: success, not in check mode
  type: str
units_changed:
  description: The units whose files changed (or would).
  returned: success
  type: list
  elements: str
verify_output:
  description: What systemd-analyze verify said, when it refused the units.
  returned: failure
  type: str
"""

import hashlib
import os
import stat
from dataclasses import dataclass

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.monitor.config import (
    MonitorConfigError,
    config_text,
    parse_config,
)
from ansible.module_utils.lingbot_fleet.monitor.install_options import (
    INSTALL_ARGUMENT_SPEC,
    RECEIPT_ROLE,
    managed_files,
    unit_paths,
)
from ansible.module_utils.lingbot_fleet.monitor.units import (
    TIMER_NAME,
    MonitorUnits,
    UnitValueError,
    unit_files,
)
from ansible.module_utils.lingbot_fleet.node import receipts
from ansible.module_utils.lingbot_fleet.node.nodefiles import (
    GENERATION_ARGUMENT_SPEC,
    NodeChanges,
    NodeFileError,
    run_command,
)
from ansible.module_utils.lingbot_fleet.node.systemd import parse_properties, verify_units

ARGUMENT_SPEC = {
    **INSTALL_ARGUMENT_SPEC,
    **GENERATION_ARGUMENT_SPEC,
    **receipts.RECEIPT_ARGUMENT_SPEC,
}


class InstallError(Exception):
    """The monitor cannot be installed; str() names the object and the fix."""

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Wanted:
    """What the node should hold, from the module's options."""

    config_text: str
    units: dict[str, str]
    directories: tuple[str, ...]


def wanted(params: dict) -> Wanted:
    """The configuration (checked as the monitor checks it), the units, the directories."""
    text = config_text(params["config"])
    try:
        config = parse_config(text, params["config_path"])
    except MonitorConfigError as error:
        raise InstallError(f"{error}; nothing was written") from None
    units = MonitorUnits(
        python=params["python"],
        app_path=params["app_path"],
        config_path=params["config_path"],
        state_dir=config.state_dir,
        textfile_dir=config.textfile_dir,
        extra_writable_paths=tuple(params["extra_writable_paths"]),
        timeout_s=params["timeout_s"],
        nice=params["nice"],
        interval=params["interval"],
        boot_delay=params["boot_delay"],
        randomized_delay=params["randomized_delay"],
        header=params["header"],
    )
    try:
        files = unit_files(units)
    except UnitValueError as error:
        raise InstallError(
            f"the monitor's units: {error}; fix the topo_monitor role variables"
        ) from None
    directories = (os.path.dirname(params["config_path"]), config.state_dir, config.textfile_dir)
    return Wanted(text, files, directories)


def timer_state(systemctl: str, timer: str) -> dict[str, str]:
    """LoadState, UnitFileState and ActiveState of the timer (read only)."""
    done = run_command(
        [
            systemctl,
            "show",
            "--property=LoadState",
            "--property=UnitFileState",
            "--property=ActiveState",
            timer,
        ],
        check=False,
    )
    return parse_properties(done.stdout)


def obsolete_files(real_dir: str, path: str) -> list[str]:
    """Every file under the directory ``path`` (found at ``real_dir``), as node paths."""
    found = []
    for dirpath, _dirs, names in os.walk(real_dir):
        relative = os.path.relpath(dirpath, real_dir)
        for name in names:
            found.append(os.path.normpath(os.path.join(path, relative, name)))
    return sorted(found)


def upload_required(changes: NodeChanges, params: dict) -> bool:
    """Whether the zipapp on the node differs and its new content is not here yet."""
    if params["app_src"] or changes.check_mode:
        return False
    current = changes.read(params["app_path"])
    return current is None or sha256(current) != params["app_checksum"]


def install_app(changes: NodeChanges, params: dict) -> bool:
    """The zipapp at app_path, mode 0755; True when it changed (or would)."""
    path, checksum = params["app_path"], params["app_checksum"]
    current = changes.read(path)
    if current is not None and sha256(current) == checksum:
        # The same program: at most its mode or owner changes.
        return changes.write_file(path, current, mode=0o755)
    if not params["app_src"]:
        # Check mode uploads nothing: the new program is reported by its checksum.
        return changes.write_file(path, f"(zipapp, sha256 {checksum})\n", mode=0o755)
    try:
        with open(params["app_src"], "rb") as handle:
            data = handle.read()
    except OSError as error:
        raise InstallError(
            f"cannot read the uploaded zipapp {params['app_src']}: {error}"
        ) from None
    if sha256(data) != checksum:
        raise InstallError(
            f"the uploaded zipapp {params['app_src']} has sha256 {sha256(data)}, not "
            f"{checksum}; the upload was cut short, run again"
        )
    return changes.write_file(path, data, mode=0o755)


def remove_obsolete(changes: NodeChanges, paths: list[str]) -> None:
    """Remove what earlier versions installed; a directory's diff lists its files only."""
    for path in paths:
        if not changes.exists(path):
            continue
        real = changes.real(path)
        info = os.lstat(real)
        if not stat.S_ISDIR(info.st_mode):
            changes.remove_file(path)
            continue
        files = obsolete_files(real, path)
        first_diff = len(changes.diffs)
        changes.remove_tree(path, files)
        del changes.diffs[first_diff:]
        changes.diffs.append(
            {
                "before_header": f"{path}/",
                "after_header": f"{path}/ (absent)",
                "before": "".join(f"{name}\n" for name in files),
                "after": "",
            }
        )


def apply_units(changes: NodeChanges, systemctl: str, changed: list[str]) -> None:
    """daemon-reload when a unit changed; the timer enabled, started, restarted if changed."""
    if changed:
        changes.run([systemctl, "daemon-reload"], "reload the systemd units")
    changes.watch_unit(TIMER_NAME)
    state = timer_state(systemctl, TIMER_NAME)
    if state.get("UnitFileState") != "enabled":
        changes.run([systemctl, "enable", TIMER_NAME], f"enable {TIMER_NAME}")
    if state.get("ActiveState") != "active":
        changes.run([systemctl, "start", TIMER_NAME], f"start {TIMER_NAME}")
    elif TIMER_NAME in changed:
        changes.run([systemctl, "restart", TIMER_NAME], f"restart {TIMER_NAME}")


def install(module: AnsibleModule) -> dict:
    params = module.params
    changes = NodeChanges.for_module(params, module.check_mode)
    want = wanted(params)
    units_at = unit_paths(params)
    differing = [
        name
        for name, path in units_at.items()
        if changes.read(path) != want.units[name].encode("utf-8")
    ]
    if differing and params["verify"]:
        verified = verify_units(
            module.get_bin_path("systemd-analyze", required=True),
            want.units,
            sorted(want.units),
            watch=tuple(want.units),
            prefix="lingbot-fleet-monitor-units.",
        )
        if verified.refused:
            raise InstallError(
                "systemd-analyze verify refused the monitor's units; nothing was written:\n"
                + verified.output.strip(),
                rc=verified.rc,
                verify_output=verified.output,
            )
    if upload_required(changes, params):
        return {"changed": False, "app_upload_required": True}
    for directory in want.directories:
        changes.make_dir(directory)
    install_app(changes, params)
    changes.write_file(params["config_path"], want.config_text, mode=0o644)
    changed = [
        name for name, path in units_at.items() if changes.write_file(path, want.units[name])
    ]
    remove_obsolete(changes, params["obsolete_paths"])
    systemctl = module.get_bin_path("systemctl", required=True)
    apply_units(changes, systemctl, changed)
    result = changes.result()
    result.update(app_upload_required=False, files=managed_files(params), units_changed=changed)
    if not module.check_mode:
        # A call that changed nothing keeps its result and what it depended on, so the
        # next run's action can answer for it (docs/converged-runs.md).
        result["receipt"] = receipts.keep(
            RECEIPT_ROLE,
            params["receipt_digest"],
            changes,
            result,
            receipts.show_units(systemctl),
        )
    return result


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = install(module)
    except InstallError as error:
        module.fail_json(msg=str(error), **error.details)
    except NodeFileError as error:
        module.fail_json(msg=f"the path monitor was not fully installed: {error}")
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
