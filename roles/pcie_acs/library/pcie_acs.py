#!/usr/bin/python
"""Ansible module: ACS redirect off at every boot on the PCIe switch ports named, opt-in."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pcie_acs
short_description: ACS request/completion redirect off on named PCIe switch ports, each boot
description:
  - ACS redirect on a PCIe switch's downstream port sends the peer traffic of the GPU below
    it up to the root complex instead of across the switch. It is a PCIe register the
    firmware or kernel sets at every boot, so it is turned off by a systemd unit
    (C(lingbot-fleet-acs-redirect-off.service)) that runs C(setpci -s <port>
    ECAP_ACS+6.w=0000:000c) at every boot and sets the bits back as they were when it is
    stopped (a rollback stops it).
  - Only switch downstream ports above one of the node's GPUs (in O(facts)) are accepted;
    a root port, a chipset port or an unknown address fails naming the ports that are
    accepted. A named port whose redirect is already off, not by this unit, is left alone.
  - While the IOMMU translates (or its mode is unknown), nothing is applied and an
    installed unit is taken away (ACS then keeps the devices' DMA apart), unless
    O(allow_translating_iommu).
  - An empty O(redirect_off_bridges) takes an installed unit away.
  - The unit runs setpci sandboxed to what it needs (C(CapabilityBoundingSet=CAP_SYS_ADMIN),
    no network, no devices, C(ProtectSystem=full), a system-call filter).
  - The unit is checked with C(systemd-analyze verify) before it lands, saved first in the
    run's generation, and shown in C(--diff). After the unit ran, the ports are read again
    and the module fails when redirect is still on. In check mode nothing is written or run.
extends_documentation_fragment:
  - lingbot_generation
  - lingbot_receipt
options:
  redirect_off_bridges:
    description: The switch downstream ports (PCI addresses, e.g. C(0000:18:00.0)).
    type: list
    elements: str
    default: []
  allow_translating_iommu:
    description: Turn redirect off even while the IOMMU translates.
    type: bool
    default: false
  facts:
    description: The node's GPU facts (C(ansible_facts.lingbot_gpu) from gpu_facts).
    type: dict
    required: true
  setpci:
    description:
      - The setpci command (package pciutils), run as root by the unit at every boot - an
        absolute path, or a bare name looked up on PATH; the program alone, no arguments
        or whitespace.
      - The file it names must be a root-owned executable that neither its group nor
        others can write, in directories with the same property; otherwise the module
        fails before anything is written.
    type: str
    default: setpci
  verify:
    description: Check the unit with C(systemd-analyze verify) before writing it.
    type: bool
    default: true
  root:
    description: The node's root directory (tests).
    type: path
    default: /
author:
  - lingbot-fleet maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: ACS redirect off on the two switch ports above the GPUs
  pcie_acs:
    redirect_off_bridges: ["0000:18:00.0", "0000:18:01.0"]
    facts: "{{ ansible_facts['lingbot_gpu'] }}"
"""

RETURN = r"""
decision:
  description:
    - The ports the unit manages (with their redirect bits before), the named ports left
      alone and why, and why nothing was applied (C(refused)).
  returned: always
  type: dict
unit_changed:
  description: Whether the unit file was written or removed (or would be).
  returned: always
  type: bool
started:
  description: Whether the unit was started or restarted, so the ports were written.
  returned: always
  type: bool
actions:
  description: What was done (or would be, in check mode).
  returned: always
  type: list
  elements: str
ports_written:
  description: The ports whose ACS the unit's start or stop wrote (or would write).
  returned: always
  type: list
  elements: str
ansible_facts:
  description: C(lingbot_gpu) with the ports read again, when the unit wrote any.
  returned: when the unit wrote a port
  type: dict
"""

import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.gpu import acs
from ansible.module_utils.lingbot_fleet.node import receipts, values
from ansible.module_utils.lingbot_fleet.node.nodefiles import (
    GENERATION_ARGUMENT_SPEC,
    NodeChanges,
    NodeFileError,
)
from ansible.module_utils.lingbot_fleet.node.systemd import verify_units


def verifier(module: AnsibleModule):
    """systemd-analyze verify of the unit in a private directory; AcsError on a complaint
    (systemd reports bad keys as warnings with exit status 0)."""

    def verify(text: str) -> None:
        if not module.params["verify"]:
            return
        verified = verify_units(
            module.get_bin_path("systemd-analyze", required=True),
            {acs.UNIT_NAME: text},
            [acs.UNIT_NAME],
            watch=(acs.UNIT_NAME,),
            prefix="lingbot-fleet-acs-unit.",
        )
        if verified.refused:
            raise acs.AcsError(
                f"systemd-analyze verify refused {acs.UNIT_NAME}; nothing was written:\n"
                + verified.output.strip()
            )

    return verify


def read_bridge(root: str):
    from ansible.module_utils.lingbot_fleet.facts import sysfs

    def read(bdf: str) -> dict:
        return sysfs.bridge_facts(Path(os.path.realpath(sysfs.pci_devices_dir(root) / bdf)))

    return read


def run_module() -> None:
    module = AnsibleModule(
        argument_spec={
            **acs.ARGUMENT_SPEC,
            **GENERATION_ARGUMENT_SPEC,
            **receipts.RECEIPT_ARGUMENT_SPEC,
        },
        supports_check_mode=True,
    )
    params = module.params
    changes = NodeChanges.for_module(params, module.check_mode, params["root"])
    result: dict = {"decision": None, "unit_changed": False, "started": False, "ports_written": []}

    def fail(message: str) -> None:
        module.fail_json(msg=message, **result, **changes.result())

    try:
        # The policy play's check, with its message: a role used from any playbook refuses
        # the same value.
        values.command(params["setpci"], acs.SETPCI_VARIABLE)
    except values.ValueRefusedError as error:
        fail(str(error))
    try:
        installed = changes.read(acs.UNIT_PATH)
        decision = acs.decide(
            params["redirect_off_bridges"],
            params["facts"],
            allow_translating_iommu=params["allow_translating_iommu"],
            installed_unit=installed.decode("utf-8", "replace") if installed else None,
        )
        result["decision"] = decision.to_json()
        if decision.refused:
            module.warn(f"ACS redirect left on: {decision.refused}")
        setpci = params["setpci"]
        if decision.ports:
            found = module.get_bin_path(setpci) if "/" not in setpci else setpci
            if not found:
                fail(f"{setpci} is not installed on this node: install pciutils and run again")
            setpci = found
            # The unit runs it as root at every boot: a root-owned program no one else can
            # replace, in root-owned directories (on the host, where commands run).
            problem = values.command_file_problem(setpci, acs.SETPCI_VARIABLE)
            if problem is not None:
                fail(str(problem))
        systemctl = module.get_bin_path("systemctl", required=True)
        result.update(
            acs.apply(
                changes,
                decision,
                params["facts"],
                setpci=setpci,
                systemctl=systemctl,
                verify_unit=verifier(module),
            )
        )
    except (acs.AcsError, NodeFileError) as error:
        fail(str(error))
    out = {**result, **changes.result()}
    if result["ports_written"] and not module.check_mode:
        facts = acs.refreshed_facts(
            params["facts"], read_bridge(params["root"]), result["ports_written"]
        )
        still = acs.still_redirecting(facts, decision) if result["started"] else []
        if still:
            fail(
                f"{acs.UNIT_NAME} ran but ACS redirect is still on for {', '.join(still)}; "
                f"read journalctl -u {acs.UNIT_NAME} and lspci -vvv -s <port> (ACSCtl)"
            )
        out.setdefault("ansible_facts", {})["lingbot_gpu"] = facts
    if not module.check_mode:
        out["receipt"] = receipts.keep(
            acs.RECEIPT_ROLE,
            params["receipt_digest"],
            changes,
            out,
            receipts.show_units(systemctl),
            root=params["root"],
        )
    module.exit_json(**out)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
