#!/usr/bin/python
"""Ansible module: nvidia-persistenced enabled and running, persistence mode on, in one call."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_persistence
short_description: nvidia-persistenced without --no-persistence-mode, persistence mode verified
description:
  - Reads the unit systemd loads for O(unit) with C(systemctl show) (its FragmentPath,
    DropInPaths, enablement and state) and the ExecStart its files put in effect.
  - When that ExecStart passes C(--no-persistence-mode), writes the drop-in
    C(<dropin_dir>/lingbot-fleet.conf) that resets ExecStart and starts the daemon without
    the flag; the vendor unit file is never edited. When the unit no longer needs it, the
    drop-in (and its directory, once empty) is removed.
  - The drop-in is saved first in the run's generation (O(generation_run_id)), written
    atomically, and shown in C(--diff).
  - Runs C(systemctl daemon-reload) when the drop-in changed or systemd reports the unit
    changed on disk, and restarts the daemon only when the ExecStart in effect changed or
    the running daemon was started with C(--no-persistence-mode). Enables the unit only
    when it is not enabled and starts it only when it is not active.
  - Then reads every GPU's persistence mode through NVML (pynvml, searched in
    O(nvml_python_path) too), else through nvidia-smi, until every GPU the driver answers
    for reports it on. GPUs the driver lost are named and left out. When persistence mode
    is off on a GPU although nothing was restarted in this call, the daemon is restarted
    once before reading again. Fails naming the GPUs (bus ids) and the fix.
  - In check mode nothing is written, reloaded or restarted, and the verification is
    skipped (the result's RV(notes) say so).
extends_documentation_fragment:
  - lingbot_generation
options:
  unit:
    description: The daemon's systemd unit.
    type: str
    default: nvidia-persistenced.service
  dropin_dir:
    description: The directory of the unit's drop-ins where C(lingbot-fleet.conf) goes.
    type: path
    default: /etc/systemd/system/nvidia-persistenced.service.d
  verify:
    description: Read every GPU's persistence mode after the change and fail when one is off.
    type: bool
    default: true
  verify_retries:
    description: How often to read the GPUs again while one still reports persistence mode off.
    type: int
    default: 10
  verify_delay_s:
    description: Seconds between two reads.
    type: float
    default: 1
  use_nvml:
    description: Read through NVML when pynvml imports; false reads with nvidia-smi.
    type: bool
    default: true
  nvml_python_path:
    description:
      - Directories (shell-style patterns allowed) searched for pynvml besides the
        interpreter's own path.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command of the fallback.
    type: str
    default: nvidia-smi
  systemctl:
    description: The systemctl command.
    type: str
    default: systemctl
  uvm_at_boot:
    description:
      - Write C(/etc/modules-load.d/lingbot-fleet-nvidia-uvm.conf) so that C(nvidia-uvm),
        which CUDA needs, is loaded at every boot, and load it now when the NVIDIA driver is
        loaded and it is not. The hardened LingBot units cannot load kernel modules, so the
        driver's on-demand load (the setuid nvidia-modprobe) does not work there.
    type: bool
    default: true
  root:
    description:
      - Prefix for every file the module reads or writes (unit files, C(/proc), sysfs), for
        tests. Commands still run on the host.
    type: path
    default: /
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: full
  facts:
    description: Returns C(ansible_facts) that update the host's facts.
    support: partial
    details:
      - Gathers C(ansible_facts.lingbot_gpu) again, as the gpu_facts module does, when it
        started or restarted the daemon, so later roles see the persistence mode in effect.
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Keep nvidia-persistenced running with persistence mode on for every GPU
  nvidia_persistence:
    nvml_python_path:
      - /opt/lingbot-fleet/venv/lib/python3*/site-packages
    generation_run_id: "{{ generations_run_id | default(omit) }}"
    generations_dir: "{{ generations_dir | default(omit) }}"
"""

RETURN = r"""
actions:
  description: What was done (in check mode, what would be done), one sentence each.
  returned: always
  type: list
  elements: str
changed_paths:
  description: The files written or removed (in check mode, that would be).
  returned: always
  type: list
  elements: str
fragment_path:
  description: The unit file systemd loads.
  returned: always
  type: str
no_persistence_mode:
  description: Whether the unit, without the drop-in, starts the daemon with --no-persistence-mode.
  returned: always
  type: bool
exec_start:
  description: The ExecStart in effect once the drop-in is as wanted.
  returned: always
  type: str
dropin:
  description: The drop-in's path and whether it is (or would be) C(present) or C(absent).
  returned: always
  type: dict
restarted:
  description: Whether the daemon was (or would be) restarted or started.
  returned: always
  type: bool
verified:
  description:
    - Whether every GPU the driver answers for reports persistence mode on; false when the
      verification was skipped.
  returned: always
  type: bool
source:
  description: Where persistence mode was read, C(nvml) or C(nvidia-smi); null when not read.
  returned: always
  type: str
reads:
  description: How many times the GPUs were read.
  returned: always
  type: int
gpus:
  description: Each GPU as last read, C(index), C(bus_id), C(lost), C(persistence_mode).
  returned: always
  type: list
  elements: dict
lost_gpus:
  description: Bus ids of the GPUs the driver lost (left out of the verification).
  returned: always
  type: list
  elements: str
notes:
  description: Why NVML was not used, why the verification was skipped.
  returned: always
  type: list
  elements: str
ansible_facts:
  description:
    - C(lingbot_generation_pending) when the drop-in was recorded in the run's generation;
      C(lingbot_gpu) when the daemon was started or restarted.
  returned: when one of them is set
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.gpu import persistence
from ansible.module_utils.lingbot_fleet.node.nodefiles import (
    GENERATION_ARGUMENT_SPEC,
    NodeChanges,
    NodeFileError,
)
from ansible.module_utils.lingbot_fleet.node.systemd import parse_properties


def read_unit(module: AnsibleModule) -> tuple[persistence.UnitState, str]:
    """The unit as systemd has it loaded, and the systemctl command."""
    params = module.params
    unit = params["unit"]
    systemctl = module.get_bin_path(params["systemctl"], required=True)
    rc, out, err = module.run_command(
        persistence.show_argv(systemctl, unit), environ_update={"LC_ALL": "C", "LANG": "C"}
    )
    if rc != 0:
        module.fail_json(
            msg=f"systemctl show {unit} failed; is systemd running on this node?",
            rc=rc,
            stdout=out,
            stderr=err,
        )
    return persistence.unit_state(unit, parse_properties(out)), systemctl


def verify(module: AnsibleModule, changes: NodeChanges, started: bool, result: dict) -> bool:
    """Read the GPUs until all are on (one restart when they are off for no reason we made)."""
    params = module.params
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]

    def read() -> persistence.GpuRead:
        return persistence.read_gpus(
            params["use_nvml"], params["nvml_python_path"], [smi], params["root"]
        )

    retries = params["verify_retries"] if started else 0
    last, reads = persistence.read_until_on(read, retries, params["verify_delay_s"], time.sleep)
    if persistence.gpus_off(last.gpus) and not started:
        off = persistence.bus_ids(persistence.gpus_off(last.gpus))
        unit = params["unit"]
        systemctl = module.get_bin_path(params["systemctl"], required=True)
        changes.run(
            [systemctl, "restart", unit],
            f"restart {unit}: persistence mode was off on GPU(s) {off}",
        )
        started = True
        last, more = persistence.read_until_on(
            read, params["verify_retries"], params["verify_delay_s"], time.sleep
        )
        reads += more
    lost = [gpu["bus_id"] or f"index {gpu['index']}" for gpu in last.gpus if gpu["lost"]]
    result.update(
        source=last.source,
        reads=reads,
        gpus=last.gpus,
        lost_gpus=lost,
        notes=result["notes"] + list(last.notes),
    )
    if lost:
        module.warn(f"GPU(s) {', '.join(lost)} lost by the driver: persistence mode not checked")
    return started


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            **persistence.ARGUMENT_SPEC,
            **GENERATION_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    params = module.params
    if params["verify_retries"] < 0 or params["verify_delay_s"] < 0:
        module.fail_json(msg="verify_retries and verify_delay_s must be 0 or more")
    changes = NodeChanges.for_module(params, module.check_mode, params["root"])
    result: dict = {
        "restarted": False,
        "verified": False,
        "source": None,
        "reads": 0,
        "gpus": [],
        "lost_gpus": [],
        "notes": [],
    }

    def fail(message: str) -> None:
        module.fail_json(msg=message, **result, **changes.result())

    try:
        if params["uvm_at_boot"]:
            persistence.load_uvm_at_boot(changes, module.get_bin_path("modprobe"), result)
        state, systemctl = read_unit(module)
        started = persistence.converge_unit(
            changes,
            state,
            dropin_dir=params["dropin_dir"],
            systemctl=systemctl,
            root=params["root"],
            result=result,
        )
        if module.check_mode:
            result["notes"].append("check mode: nothing restarted, persistence mode not verified")
        elif params["verify"]:
            started = verify(module, changes, started, result)
        result["restarted"] = started
    except (persistence.PersistenceError, NodeFileError) as error:
        fail(str(error))
    off = persistence.gpus_off(result["gpus"])
    if params["verify"] and not module.check_mode:
        if not result["gpus"]:
            fail(f"no GPU found through {result['source']}; check the NVIDIA driver (nvidia-smi)")
        if off:
            fail(
                f"persistence mode is off on GPU(s) {persistence.bus_ids(off)} after "
                f"{result['reads']} read(s), although {params['unit']} runs with ExecStart "
                f"{result['exec_start']}; check its ExecStart (systemctl cat {params['unit']}) "
                "and the daemon's log (journalctl -u "
                f"{params['unit']}), or turn it on by hand with nvidia-smi -pm 1"
            )
        result["verified"] = True
    out = {**result, **changes.result()}
    if started and params["verify"] and not module.check_mode:
        out.setdefault("ansible_facts", {})["lingbot_gpu"] = refreshed_facts(module)
    module.exit_json(**out)


def refreshed_facts(module: AnsibleModule) -> dict:
    """The facts document again, so later roles see the persistence mode now in effect."""
    from ansible.module_utils.lingbot_fleet.facts import gather_facts

    params = module.params
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    return gather_facts(
        root=params["root"],
        use_nvml=params["use_nvml"],
        nvml_python_path=params["nvml_python_path"],
        smi_command=[smi],
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
