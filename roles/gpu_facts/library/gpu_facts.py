#!/usr/bin/python
"""Ansible module: gather the node's GPU facts in one call (lingbot_fleet.facts)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Gather GPU, PCIe, NUMA, IOMMU and P2P facts of a node in one call
description:
  - Reads NVML through pynvml (nvidia-ml-py) when it is importable, sysfs and /proc, and
    runs nvidia-smi only as a fallback when NVML is not importable.
  - Also says where numactl is on the node (C(host.numactl_path)), and where pynvml comes
    from, so the roles install neither when it is there.
  - Returns the facts as C(ansible_facts.lingbot_gpu), a versioned document described in
    docs/facts.md of lingbot-fleet; C(sources) tells where each field group came from.
  - Changes nothing.
options:
  root:
    description: Directory read as C(/) for sysfs and /proc (tests point it at a rendered tree).
    type: path
    default: /
  use_nvml:
    description: Read through NVML when pynvml imports; false reads with nvidia-smi.
    type: bool
    default: true
  nvml_python_path:
    description:
      - Directories to search for pynvml besides the interpreter's own path; shell-style
        patterns are expanded (e.g. C(/opt/lingbot-fleet/venv/lib/python3*/site-packages)).
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: The nvidia-smi command used by the fallback.
    type: str
    default: nvidia-smi
  pynvml_venv:
    description:
      - The virtualenv the gpu_facts role installs nvidia-ml-py into. When set, the result
        says in RV(pynvml_in_venv) whether C(<pynvml_venv>/lib/python3*/site-packages/pynvml.py)
        exists, so the role installs it only when it is missing.
    type: path
  saved_probe_dir:
    description:
      - The p2p_probe save directory; its C(latest.json), validated as the probe reads it,
        is returned as C(ansible_facts.lingbot_saved_probe), so the p2p_probe action can
        reuse it without a module call of its own. The default is the probe's default
        (C(lingbot_fleet.node.state_dirs.PROBE_DIR)).
    type: path
    default: /var/lib/lingbot-fleet/probe
  pynvml_sha1:
    description:
      - With O(pynvml_venv), RV(pynvml_in_venv) also requires this SHA-1 (the controller's
        copy, for air-gapped nodes).
    type: str
  persistence_unit:
    description:
      - The nvidia-persistenced unit of the nvidia_persistence role. When set, the result
        also says what that role's module would do on this node with these options
        (C(ansible_facts.lingbot_persistence_state), from the same code in check mode), so
        a node that needs nothing costs that role no module call.
    type: str
  reuse_in_run:
    description:
      - The run's id (C(generations_run_id)). Read by the gpu_facts action plugin, never
        passed to the node - a second task of the same run, with the same options, while
        the node is in the boot of the first reading (C(lingbot_boot_id)), answers from that
        reading without a call; see C(lingbot_gpu_gathered) below.
    type: str
  receipts:
    description:
      - Also return the receipts modules left on the node (C(lingbot_fleet.node.receipts)) with
        the stat signature of their paths and the listings of their directories, the state
        of their units and the readings they hold (C(boot_state), the digest of the files
        the kernel command line is read from; C(lingbot_answers), whether each LingBot
        instance answers C(GET /metrics)) now, as C(ansible_facts.lingbot_receipts), so
        a role whose receipt stands (kernel_cmdline, lingbot_service, pcie_acs,
        topo_monitor) costs no module call.
    type: bool
    default: false
  persistence_dropin_dir:
    description: The role's drop-in directory (with O(persistence_unit)).
    type: path
    default: /etc/systemd/system/nvidia-persistenced.service.d
  persistence_uvm_at_boot:
    description: Whether the role keeps nvidia-uvm loaded at boot (with O(persistence_unit)).
    type: bool
    default: true
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: none
  facts:
    description: Returns C(ansible_facts) that update the host's facts.
    support: full
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Gather the GPU facts
  gpu_facts:
    nvml_python_path:
      - /opt/lingbot-fleet/venv/lib/python3*/site-packages

- name: Gather the GPU facts and say whether the venv holds the controller's pynvml.py
  gpu_facts:
    nvml_python_path:
      - /opt/lingbot-fleet/venv/lib/python3*/site-packages
    pynvml_venv: /opt/lingbot-fleet/venv
    pynvml_sha1: "{{ lookup('lingbot_pynvml', 'sha1') }}"
"""

RETURN = r"""
ansible_facts:
  description: The facts, under the single key lingbot_gpu.
  returned: always
  type: dict
  contains:
    lingbot_gpu:
      description: Facts document (schema_version 1, see docs/facts.md).
      type: dict
    lingbot_persistence_state:
      description:
        - With O(persistence_unit) - the options, C(pending) (what the nvidia_persistence
          module would do, one sentence each; empty when nothing), C(error) (why it would
          fail), C(fragment_path), C(exec_start), C(no_persistence_mode), C(dropin) and
          C(read_at_s) (the node's clock).
      type: dict
    lingbot_receipts:
      description:
        - With O(receipts) - role -> C(receipt) (the document the role's module wrote) and
          C(current) (C(paths), each path's stat signature, or content digest under /proc
          and /sys, now; C(listings), each listed directory's inode and mtime; C(units),
          each unit's LoadState, UnitFileState, ActiveState, SubState, MainPID and
          InvocationID now; C(readings), each reading the receipt holds, read now;
          C(read_at_s), the node's clock). See docs/converged-runs.md.
      type: dict
    lingbot_toolkit_units:
      description:
        - The unit files the toolkit installed on the node (names starting with
          C(lingbot-fleet-) under C(/etc/systemd/system)), read in every call, so a role
          whose unit is there runs to keep or remove it, whether or not it has a receipt.
      type: list
      elements: str
    lingbot_boot_id:
      description: This boot's id (C(/proc/sys/kernel/random/boot_id)); null when unreadable.
      type: str
    lingbot_gpu_gathered:
      description:
        - With O(reuse_in_run), set by the action plugin - the stamp of this reading
          (C(run_id), C(options_digest), C(boot_id), C(pynvml_path), C(pynvml_in_venv)).
      type: dict
    lingbot_saved_probe:
      description:
        - The saved probe of O(saved_probe_dir) - C(save_dir), C(probe) (the document, null
          when there is none or it is unusable), C(note) (why it is unusable) and
          C(read_at_s) (the node's clock when it was read); see docs/facts.md.
      type: dict
pynvml_path:
  description: The pynvml file NVML is (or would be) read through; null when none is importable.
  returned: always
  type: str
reused:
  description:
    - True when the action plugin answered from a reading made earlier in the run (no call);
      C(pynvml_path) and C(pynvml_in_venv) are then that reading's.
  returned: when the reading was reused
  type: bool
pynvml_in_venv:
  description:
    - Whether O(pynvml_venv) holds pynvml.py (with O(pynvml_sha1) - that very file); null
      without O(pynvml_venv).
  returned: always
  type: bool
"""


import glob
import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.boot.bootfiles import (
    BOOT_ID_FACT,
    BOOT_STATE_READING,
    boot_state_digest,
    read_boot_id,
)
from ansible.module_utils.lingbot_fleet.facts import FACT_NAME, gather_facts
from ansible.module_utils.lingbot_fleet.facts.nvml import find_pynvml
from ansible.module_utils.lingbot_fleet.gpu.persistence import (
    DEFAULT_DROPIN_DIR,
    STATE_FACT_NAME,
    assess,
    show_argv,
)
from ansible.module_utils.lingbot_fleet.gpu.probe_saved import (
    DEFAULT_SAVE_DIR,
    SAVED_PROBE_FACT_NAME,
    saved_probe_fact,
)
from ansible.module_utils.lingbot_fleet.lingbot.service_reading import ANSWERS_READING, answers
from ansible.module_utils.lingbot_fleet.node import receipts
from ansible.module_utils.lingbot_fleet.node.nodefiles import NodeChanges
from ansible.module_utils.lingbot_fleet.node.systemd import parse_properties, parse_units


def pynvml_in_venv(module: AnsibleModule, venv: str | None, sha1: str | None) -> bool | None:
    """Whether the venv holds pynvml.py (with that SHA-1 when one is given)."""
    if not venv:
        return None
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "pynvml.py")
    return any(sha1 is None or module.sha1(path) == sha1 for path in glob.glob(pattern))


def persistence_state(module: AnsibleModule) -> dict:
    """What the nvidia_persistence module would do here with the given options."""
    params = module.params
    unit = params["persistence_unit"]
    systemctl = module.get_bin_path("systemctl") or "systemctl"
    rc, out, err = module.run_command(
        show_argv(systemctl, unit), environ_update={"LC_ALL": "C", "LANG": "C"}
    )
    changes = NodeChanges(check_mode=True, root=params["root"])
    state = assess(
        changes,
        parse_properties(out) if rc == 0 else {},
        unit=unit,
        dropin_dir=params["persistence_dropin_dir"],
        uvm_at_boot=params["persistence_uvm_at_boot"],
        systemctl=systemctl,
        modprobe=module.get_bin_path("modprobe"),
        root=params["root"],
        now_s=time.time(),
    )
    if rc != 0:
        state["error"] = f"systemctl show {unit} failed (rc {rc}): {err.strip()}"
    return state


def unit_states(module: AnsibleModule, units: list[str]) -> dict[str, dict[str, str]]:
    """receipts.UNIT_PROPERTIES of the units, in one systemctl call ({} when it fails)."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return {}
    properties = ",".join(("Id", *receipts.UNIT_PROPERTIES))
    rc, out, _err = module.run_command(
        [systemctl, "show", f"--property={properties}", "--", *units],
        environ_update={"LC_ALL": "C", "LANG": "C"},
    )
    return parse_units(out) if rc == 0 else {}


# Where the toolkit's own units live, and how their names start (pcie_acs, topo_monitor).
TOOLKIT_UNIT_DIR = "/etc/systemd/system"
TOOLKIT_UNIT_PREFIX = "lingbot-fleet-"


def toolkit_units(root: str) -> list[str]:
    """The toolkit's unit files on the node (what a role removes when nothing is asked)."""
    try:
        names = os.listdir(os.path.join(root, TOOLKIT_UNIT_DIR.lstrip("/")))
    except OSError:
        return []
    return sorted(name for name in names if name.startswith(TOOLKIT_UNIT_PREFIX))


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "default": "/"},
            "use_nvml": {"type": "bool", "default": True},
            "nvml_python_path": {"type": "list", "elements": "str", "default": []},
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "pynvml_venv": {"type": "path"},
            "pynvml_sha1": {"type": "str"},
            "saved_probe_dir": {"type": "path", "default": DEFAULT_SAVE_DIR},
            "receipts": {"type": "bool", "default": False},
            # Taken by the action plugin (reuse within a run); documented, never sent.
            "reuse_in_run": {"type": "str"},
            "persistence_unit": {"type": "str"},
            "persistence_dropin_dir": {"type": "path", "default": DEFAULT_DROPIN_DIR},
            "persistence_uvm_at_boot": {"type": "bool", "default": True},
        },
        required_by={"pynvml_sha1": "pynvml_venv"},
        supports_check_mode=True,
    )
    params = module.params
    smi = module.get_bin_path(params["nvidia_smi"]) or params["nvidia_smi"]
    facts = gather_facts(
        root=params["root"],
        use_nvml=params["use_nvml"],
        nvml_python_path=params["nvml_python_path"],
        smi_command=[smi],
    )
    ansible_facts = {
        FACT_NAME: facts,
        SAVED_PROBE_FACT_NAME: saved_probe_fact(params["saved_probe_dir"], time.time()),
    }
    if params["persistence_unit"]:
        ansible_facts[STATE_FACT_NAME] = persistence_state(module)
    if params["receipts"]:
        ansible_facts[receipts.FACT_NAME] = receipts.read_receipts(
            params["root"],
            lambda units: unit_states(module, units),
            time.time(),
            {
                BOOT_STATE_READING: lambda _recorded: boot_state_digest(params["root"]),
                ANSWERS_READING: answers,
            },
        )
    ansible_facts["lingbot_toolkit_units"] = toolkit_units(params["root"])
    ansible_facts[BOOT_ID_FACT] = read_boot_id(params["root"])
    module.exit_json(
        changed=False,
        ansible_facts=ansible_facts,
        pynvml_path=find_pynvml(params["nvml_python_path"]),
        pynvml_in_venv=pynvml_in_venv(module, params["pynvml_venv"], params["pynvml_sha1"]),
    )


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
