#!/usr/bin/python
"""Ansible module kernel_cmdline: the kernel command line, configured and verified."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Keep kernel parameters present or absent in the boot configuration
description:
  - Makes the kernel command line of the next boot follow a policy of parameters that
    must be present (with a value, or as a bare flag) and parameters that must be absent.
    One call reads the node, decides, writes, regenerates the boot configuration when
    needed and reports; a node that already follows the policy is not touched.
  - The boot loader family is found on the node when O(bootloader=auto) (see there).
  - Debian family (C(grub_d)) - unwanted parameters are removed wherever they are set in
    C(GRUB_CMDLINE_LINUX) or C(GRUB_CMDLINE_LINUX_DEFAULT), in C(/etc/default/grub) and
    in every drop-in of C(/etc/default/grub.d). A present parameter that these files
    already set is left where it is; the others go into one drop-in owned by the
    toolkit, C(/etc/default/grub.d/<dropin_name>.cfg), which appends them to
    C(GRUB_CMDLINE_LINUX) (no such parameter, no drop-in).
  - Debian family - C(update-grub) runs when a file changed, and also when the default
    entry of C(grub.cfg) does not boot what the grub files configure (a configured word
    it lacks, or a parameter the policy wants absent), so a run that was interrupted
    between the files and C(update-grub), or whose C(update-grub) failed, is finished by
    the next one. Words grub-mkconfig's scripts add (C(root=), C(ro), Ubuntu's
    C($vt_handoff)) do not count.
  - RedHat family (C(grubby)) - C(/etc/default/grub) is edited for future kernels
    (missing parameters are appended to C(GRUB_CMDLINE_LINUX)), and
    C(grubby --update-kernel=ALL --args/--remove-args) updates the installed kernels'
    boot entries whenever C(grubby --info=ALL) shows an entry that does not follow the
    policy.
  - Only the characters of the parameters that must change are edited; every other byte
    of a file stays as it was (comments, quoting, CRLF line ends).
  - Each changed file is checked before it lands (the module's own parse of the result
    must satisfy the policy, and C(sh -n) must accept it), written atomically, and its
    previous version is saved first - in the run's generation when O(generation_run_id)
    is set (a file that did not exist is recorded as absent, so a rollback removes it),
    else under O(backup_dir). The boot entries and C(grubenv) that C(grubby) edits are
    saved the same way before it runs.
  - The next boot is read the way grub reads it - the default BLS entry when there are
    BLS entries, else C(grub.cfg)'s default entry (C(GRUB_DEFAULT) as an index, id,
    title, submenu path or C(saved), with C(saved_entry) and C(next_entry) from
    C(grubenv)), with grub's variables expanded. A variable C(grubenv) defines takes that
    value (C($kernelopts), C($tuned_params)); one that C(grub.cfg) sets to several values
    is decided by grub's script at boot (C($vt_handoff)), and is taken as the running
    boot took it, so it never makes a reboot pending.
  - O(verify=true) changes nothing; it checks the running kernel (C(/proc/cmdline), the
    IOMMU groups' type, the NUMA node of NVIDIA GPUs) and fails with the evidence when
    the policy is not in effect.
  - O(guard_reboot=true) changes nothing; it fails, naming the entry, the kernel and the
    fix, when a reboot now would boot a default entry that misses the policy, or, with
    NVIDIA GPUs on the PCI bus, a kernel without an NVIDIA module built for it (DKMS's
    C(updates/dkms), C(extra), C(weak-updates), precompiled packages under C(kernel/);
    one modules.dep does not list counts as missing). The role calls it before each reboot.
  - C(reboot_required) compares the policy with C(/proc/cmdline), never with the grub
    files. The state is also returned as facts (C(kernel_cmdline_*)), with this boot's id
    (C(lingbot_boot_id)).
  - After a call that changed nothing outside check mode, with O(receipt_digest), the
    module leaves a receipt (C(/var/lib/lingbot-fleet/receipts/kernel_cmdline.json)) of
    its result, of what it wrote or read through NodeChanges and of the digest of every
    boot file, C(/proc/cmdline) and the boot id; the action plugin answers a later run with
    that result, without a call, while all of them are as they were
    (docs/converged-runs.md). A call that changed something removes it.
version_added: "0.1.0"
author:
  - lingbot-fleet maintainers (!UNKNOWN)
extends_documentation_fragment:
  - lingbot_generation
  - lingbot_receipt
options:
  present:
    description:
      - Parameters that must be present, name to value; a null value is a bare flag
        (C(quiet)).
      - Values may contain C(=) and commas (C(pci=realloc=off)).
    type: dict
    default: {}
  absent:
    description:
      - Parameters that must be absent. A name removes every occurrence; C(name=value)
        removes that value only. For the comma-list parameters C(pci), C(iommu),
        C(intel_iommu) and C(amd_iommu) it removes that option from a list, so
        C(pci=noacpi) turns C(pci=noacpi,realloc) into C(pci=realloc).
    type: list
    elements: str
    default: []
  iommu_vendor_switch:
    description:
      - Also require the CPU vendor's IOMMU switch, C(intel_iommu=on) or C(amd_iommu=on),
        chosen from C(vendor_id) in C(/proc/cpuinfo).
    type: bool
    default: false
  bootloader:
    description:
      - C(grub_d) for the Debian family, C(grubby) for the RedHat family.
      - C(auto) decides on the node - C(grubby) when there are BLS entries
        (C(/boot/loader/entries/*.conf)) and C(grubby) is installed; else by C(ID) and
        C(ID_LIKE) of C(/etc/os-release) (C(debian), C(ubuntu) - C(grub_d); C(rhel),
        C(centos), C(fedora) and their rebuilds - C(grubby)); else C(grubby) when
        C(/etc/redhat-release) exists; else by the tool installed (C(update-grub), then
        C(grubby)). The result is returned as RV(bootloader).
    type: str
    choices: [auto, grub_d, grubby]
    default: auto
  dropin_name:
    description:
      - Name (without C(.cfg)) of the toolkit's drop-in in C(/etc/default/grub.d/), a file
        name only (letters, digits, C(_), C(-), C(+), C(.), not starting with C(.), at most
        64 characters). A drop-in path that is a symbolic link is refused.
    type: str
    default: lingbot-fleet
  allow_risky_params:
    description:
      - Names of boot parameters on the deny-list that may still be set (or, for C(root),
        C(rootfstype), C(rootflags) and C(nfsroot), removed). Without them the module
        refuses a parameter that opens a root shell or runs another program at boot
        (C(init), C(rdinit), C(rd.break), C(rd.shell), C(rd.emergency), C(single), C(S),
        C(s), C(1), C(emergency), C(rescue), C(systemd.debug_shell), C(systemd.run)),
        changes the boot target (C(systemd.unit), C(systemd.wants), C(systemd.mask), C(2)
        to C(5), and their C(rd.) forms), changes the root file system (C(root),
        C(rootfstype), C(rootflags), C(nfsroot), C(systemd.volatile)) or mandatory access
        control (C(selinux), C(enforcing), C(apparmor), C(security), C(lsm)).
      - Names and values follow a bounded grammar (names of letters, digits, C(_), C(-),
        C(.), at most 64 characters; values of letters, digits and C(_.,:=+/@-), at most
        256).
    type: list
    elements: str
    default: []
  update_bootloader:
    description:
      - Run C(update-grub) (grub_d) or C(grubby) (grubby) when the boot configuration must
        follow. With false the boot entries are left alone; C(reboot_required) still
        reports.
    type: bool
    default: true
  backup_dir:
    description:
      - Where the previous version of each changed file is saved, as
        C(<backup_dir>/<timestamp>/<path of the file>), when O(generation_run_id) is not
        set.
    type: path
    default: /var/lib/lingbot-fleet/backup
  root:
    description:
      - Prefix for every path the module reads or writes, for image builds and tests.
        Commands still run on the host, so combine a root other than C(/) with
        O(update_bootloader=false).
    type: path
    default: /
  verify:
    description:
      - Verify the running kernel instead of configuring. Fails, with the evidence,
        when a present parameter is missing from C(/proc/cmdline), an absent one is
        there, an IOMMU group's type is not C(identity) while C(iommu=pt) is asked, or
        an NVIDIA GPU's C(numa_node) is -1.
    type: bool
    default: false
  verify_gpu_numa:
    description:
      - In verify mode, require a NUMA node other than -1 for every NVIDIA GPU. Turn it
        off on single-socket machines whose firmware reports no proximity at all.
    type: bool
    default: true
  verify_gpus:
    description:
      - In verify mode, also prove the GPUs came back - every GPU of O(verify_gpus_before)
        is on the PCI bus, and the NVIDIA driver (asked through NVML, else nvidia-smi)
        is loaded and answers for every NVIDIA GPU on the bus. A driver that cannot be
        asked at all proves nothing and fails nothing; the evidence says so.
    type: bool
    default: true
  verify_gpus_before:
    description:
      - Bus ids of the NVIDIA GPUs the node had before the reboot (the facts' C(gpus[].bus_id)).
    type: list
    elements: str
    default: []
  verify_against:
    description:
      - In verify mode, what the running kernel is held to. C(policy) - the present and
        absent parameters (and the IOMMU and NUMA evidence above). C(configuration) - the
        command line the node's boot configuration gives its default entry (what a
        rollback restored), whatever it holds; the policy is not applied.
    type: str
    choices: [policy, configuration]
    default: policy
  guard_reboot:
    description:
      - Check, instead of configuring, that a reboot now keeps the GPUs - the default boot
        entry holds the policy (only with O(verify_against=policy); a rollback reboots into
        the configuration it restored), and its kernel has the NVIDIA module when NVIDIA GPUs
        are on the PCI bus. Fails with RV(next_boot_driver) when not.
    type: bool
    default: false
attributes:
  check_mode:
    description: Can run in check mode and predicts the change without making it.
    support: full
    details: Reports every file and command a real run would change or run; writes,
      records and runs nothing (read-only C(grubby --info=ALL) and C(sh -n) still run).
  diff_mode:
    description: Returns the before and after of what it changes (or would change) with --diff.
    support: full
notes:
  - C(grub-script-check) validates grub.cfg scripts; the files edited here are sourced by
    C(sh), so they are checked with C(sh -n). C(update-grub) runs C(grub-script-check) on
    the grub.cfg it generates before installing it.
"""

EXAMPLES = r"""
- name: Put the IOMMU in passthrough and drop pci=noacpi
  kernel_cmdline:
    present:
      iommu: pt
    absent:
      - pci=noacpi

- name: Also turn on the CPU vendor's IOMMU and turn PCIe ASPM off
  kernel_cmdline:
    present:
      iommu: pt
      pcie_aspm: "off"
    absent: [pci=noacpi]
    iommu_vendor_switch: true

- name: Refuse a reboot that would lose the GPU driver
  kernel_cmdline:
    present:
      iommu: pt
    absent: [pci=noacpi]
    guard_reboot: true

- name: Verify the running kernel after a reboot
  kernel_cmdline:
    present:
      iommu: pt
    absent: [pci=noacpi]
    verify: true
"""

RETURN = r"""
changed:
  description: Whether a file was (or in check mode would be) written or removed, or a
    boot loader command run.
  returned: always
  type: bool
actions:
  description: One sentence per change or command, prefixed with C(would) in check mode.
  returned: always
  type: list
  elements: str
  sample: ["update /etc/default/grub", "create /etc/default/grub.d/lingbot-fleet.cfg",
           "run update-grub"]
changed_paths:
  description: Files that were (or in check mode would be) written or removed.
  returned: always
  type: list
  elements: str
  sample: ["/etc/default/grub", "/etc/default/grub.d/lingbot-fleet.cfg"]
backups:
  description: Where the previous versions were saved (files of the run's pending
    generation when generation_run_id is set, else under backup_dir).
  returned: when a file that existed was changed, outside check mode
  type: list
  elements: str
bootloader:
  description: The boot loader family used, C(grub_d) or C(grubby).
  returned: when verify is false
  type: str
configured:
  description: The default boot entry's parameters as the grub files configure them
    after the change (GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT), or as they
    would be in check mode.
  returned: when verify is false
  type: list
  elements: str
  sample: ["iommu=pt", "quiet"]
next_boot:
  description: What the next boot gives the kernel (the default entry, grub's variables
    expanded, without the image), read at the end of the run (in check mode, as it is
    now); null when no default entry was found.
  returned: when verify is false
  type: list
  elements: str
  sample: ["root=UUID=6f1c2a4e-3b5d-4e8f-9a7b-0c1d2e3f4a5b", "ro", "iommu=pt", "quiet"]
next_boot_source:
  description: The file the default entry was read from (grub.cfg or a BLS entry).
  returned: when verify is false
  type: str
  sample: /boot/grub/grub.cfg
running:
  description: The running kernel's parameters, from /proc/cmdline.
  returned: always
  type: list
  elements: str
  sample: ["BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64", "ro", "quiet"]
reboot_required:
  description: True when the running kernel does not follow the policy (a present
    parameter missing from /proc/cmdline, or an absent one there).
  returned: when verify is false
  type: bool
missing_running:
  description: Present parameters the running kernel lacks.
  returned: always
  type: list
  elements: str
unwanted_running:
  description: Parameters of the running kernel that the policy wants absent.
  returned: always
  type: list
  elements: str
ansible_facts:
  description: The state, as host facts for the rest of the play.
  returned: always
  type: dict
  contains:
    kernel_cmdline_reboot_required:
      description: RV(reboot_required); false after a verification that passed.
      type: bool
    kernel_cmdline_configured:
      description: RV(configured).
      type: list
      elements: str
      returned: when verify is false
    kernel_cmdline_running:
      description: RV(running).
      type: list
      elements: str
    lingbot_boot_id:
      description: This boot's id (C(/proc/sys/kernel/random/boot_id)).
      type: str
    lingbot_generation_pending:
      description: The run id, when a file was recorded into the run's generation.
      type: str
      returned: when something was recorded
evidence:
  description: In verify mode, what was read from the running kernel.
  returned: when verify is true
  type: dict
  sample:
    cmdline: "BOOT_IMAGE=/boot/vmlinuz ro iommu=pt"
    iommu_group_types: {"18": "identity"}
    gpus: [{"bdf": "0000:41:00.0", "numa_node": 0}]
    gpu_proof:
      gpus_on_bus: ["0000:41:00.0"]
      gpus_before: ["0000:41:00.0"]
      driver: {"state": "answers", "evidence": []}
next_boot_driver:
  description: With O(guard_reboot), the default entry's kernel and its NVIDIA module.
    C(state) is C(built), C(missing), C(not_indexed) (built, but modules.dep does not list
    it) or C(unknown) (the entry does not name the kernel's release; C(note) says why);
    C(problem) and C(fix) name the kernel, the module and what to do when it would lose
    the driver.
  returned: when guard_reboot is true
  type: dict
  sample:
    kernel: 6.1.0-18-amd64
    image: /boot/vmlinuz-6.1.0-18-amd64
    modules: [updates/dkms/nvidia-current.ko]
    state: built
    problem: null
    fix: null
gpus_on_bus:
  description: With O(guard_reboot), the bus ids of the NVIDIA GPUs on the PCI bus.
  returned: when guard_reboot is true
  type: list
  elements: str
receipt:
  description:
    - C(written), C(unchanged), C(removed), C(none), C(not written) with the reason, or
      C(stands) when the action answered from the receipt without a call.
  returned: when verify is false, outside check mode
  type: str
problems:
  description: In verify mode, each way the running kernel differs from the policy.
  returned: when verify is true
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.boot import kernel_options
from ansible.module_utils.lingbot_fleet.boot.bootfiles import BOOT_ID_FACT, read_boot_id
from ansible.module_utils.lingbot_fleet.boot.cmdline import PolicyError
from ansible.module_utils.lingbot_fleet.boot.grub import (
    GrubEditError,
    GrubParseError,
    NodeLinkError,
)
from ansible.module_utils.lingbot_fleet.boot.kernel_cmdline import (
    ARGUMENT_SPEC,
    ModuleError,
    configure,
    drop_receipt,
    guard_reboot,
    keep_receipt,
    verify,
    written_so_far,
)
from ansible.module_utils.lingbot_fleet.node import values
from ansible.module_utils.lingbot_fleet.node.nodefiles import NodeChanges, NodeFileError


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    changes = None
    try:
        # The checks the policy play makes, with its messages: a role used from any
        # playbook, under any tags, refuses the same values.
        kernel_options.check_values(
            params["present"], params["absent"], params["dropin_name"], params["allow_risky_params"]
        )
        if params["verify"]:
            result = verify(params)
        elif params["guard_reboot"]:
            result = guard_reboot(params)
        else:
            changes = NodeChanges.for_module(
                params,
                module.check_mode,
                params["root"],
                backup_dir=None if params["generation_run_id"] else params["backup_dir"],
            )
            if not module.check_mode:
                # Only a call that ends configured writes it again (keep_receipt).
                drop_receipt(params["root"])
            result = configure(params, changes, module.get_bin_path)
            result["ansible_facts"][BOOT_ID_FACT] = read_boot_id(params["root"])
            if not module.check_mode:
                result["receipt"] = keep_receipt(params, changes, result)
    except values.ValueRefusedError as error:
        module.fail_json(msg=str(error))
    except ModuleError as error:
        module.fail_json(msg=error.msg, **error.details)
    except (PolicyError, GrubParseError, GrubEditError, NodeLinkError) as error:
        message = str(error)
        if "nothing was written" not in message and "was not written" not in message:
            message += " Nothing was written."
        module.fail_json(msg=message)
    except NodeFileError as error:
        where = written_so_far(changes) if changes is not None else " Nothing was written."
        module.fail_json(msg=f"{error}.{where}", changed=bool(changes and changes.changed))
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
