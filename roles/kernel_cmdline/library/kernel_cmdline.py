#!/usr/bin/python
"""Ansible module kernel_cmdline: the kernel command line, configured and verified."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: kernel_cmdline
short_description: Keep kernel parameters present or absent in the boot configuration
description:
  - Makes the configured kernel command line follow a policy of parameters that must be
    present (with a value, or as a bare flag) and parameters that must be absent.
  - Debian family (C(bootloader=grub_d)) - the parameters to add live in one drop-in owned
    by the toolkit, C(/etc/default/grub.d/<dropin_name>.cfg), which appends them to
    C(GRUB_CMDLINE_LINUX). Unwanted parameters are removed wherever they are set in
    C(GRUB_CMDLINE_LINUX) or C(GRUB_CMDLINE_LINUX_DEFAULT), in C(/etc/default/grub) and
    in every other drop-in. Then C(update-grub) runs.
  - RedHat family (C(bootloader=grubby)) - C(/etc/default/grub) is edited for future
    kernels (missing parameters are appended to C(GRUB_CMDLINE_LINUX)), and
    C(grubby --update-kernel=ALL --args/--remove-args) updates the installed kernels'
    boot entries.
  - Only the characters of the parameters that must change are edited; every other byte
    of a file stays as it was (comments, quoting, CRLF line ends).
  - Each changed file is checked before it lands (the module's own parse of the result
    must satisfy the policy, and C(sh -n) must accept it), written atomically, and its
    previous version is saved: in the run's generation when O(generation_run_id) is
    set (the generations role; a file that did not exist is recorded as absent, so a
    rollback removes it), else under O(backup_dir).
  - With O(generation_run_id) set on the RedHat family, the boot entries
    (C(/boot/loader/entries/*.conf)) and C(grubenv) are recorded too before C(grubby)
    changes them.
  - The module runs C(update-grub) or C(grubby) itself, only when it changed something
    and never in check mode, so that a reboot later in the same play boots the new
    configuration.
  - O(verify=true) changes nothing; it checks the running kernel (C(/proc/cmdline), the
    IOMMU groups' type, the NUMA node of NVIDIA GPUs) and fails with the evidence when
    the policy is not in effect.
  - C(reboot_required) compares the policy with C(/proc/cmdline), never with the grub
    files.
version_added: "0.1.0"
author:
  - lingbot-fleet
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
      - C(grub_d) for the Debian family, C(grubby) for the RedHat family; C(auto) picks
        C(grubby) when C(/etc/redhat-release) exists, else C(grub_d).
    type: str
    choices: [auto, grub_d, grubby]
    default: auto
  dropin_name:
    description:
      - Name (without C(.cfg)) of the toolkit's drop-in in C(/etc/default/grub.d/).
    type: str
    default: lingbot-fleet
  update_bootloader:
    description:
      - Run C(update-grub) (grub_d) or C(grubby) (grubby) when something changed. With
        false the boot entries are left alone; C(reboot_required) still reports.
    type: bool
    default: true
  backup_dir:
    description:
      - Where the previous version of each changed file is saved, as
        C(<backup_dir>/<timestamp>/<path of the file>).
    type: path
    default: /var/lib/lingbot-fleet/backup
  generation_run_id:
    description:
      - The run id of the generations role (C(generations_run_id)). When set, every file
        is recorded in C(<generations_dir>/pending/<run id>/) before it is written, and
        O(backup_dir) is not used.
    type: str
  generations_dir:
    description: Where the generations live (the generations role's C(generations_dir)).
    type: path
    default: /var/lib/lingbot-fleet/generations
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
attributes:
  check_mode:
    support: full
  diff_mode:
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

- name: Verify the running kernel after a reboot
  kernel_cmdline:
    present:
      iommu: pt
    absent: [pci=noacpi]
    verify: true
"""

RETURN = r"""
configured:
  description: The default boot entry's parameters after the change (from grub's
    GRUB_CMDLINE_LINUX then GRUB_CMDLINE_LINUX_DEFAULT), or as they would be in check
    mode.
  returned: when verify is false
  type: list
  elements: str
  sample: ["console=ttyS0", "iommu=pt", "quiet"]
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
files:
  description: Paths that were (or in check mode would be) written or removed.
  returned: when verify is false
  type: list
  elements: str
  sample: ["/etc/default/grub", "/etc/default/grub.d/lingbot-fleet.cfg"]
backups:
  description: Where the previous versions were saved (in the run's open generation
    when generation_run_id is set).
  returned: when verify is false
  type: list
  elements: str
commands:
  description: Commands run (or that would run in check mode), as argument lists.
  returned: when verify is false
  type: list
  elements: list
  sample: [["/usr/sbin/update-grub"]]
evidence:
  description: In verify mode, what was read from the running kernel.
  returned: when verify is true
  type: dict
  sample:
    cmdline: "BOOT_IMAGE=/boot/vmlinuz ro iommu=pt"
    iommu_group_types: {"18": "identity"}
    gpus: [{"bdf": "0000:41:00.0", "numa_node": 0}]
problems:
  description: In verify mode, each way the running kernel differs from the policy.
  returned: when verify is true
  type: list
  elements: str
"""

import glob
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.lingbot_fleet.cmdline import (
    CmdlinePolicy,
    KernelParam,
    PolicyError,
    build_policy,
    check_policy,
    cpu_vendor_from_cpuinfo,
    iommu_vendor_switch,
    parse_cmdline,
    parse_word,
    satisfies,
    split_words,
    strip_unwanted,
)
from ansible.module_utils.lingbot_fleet.generations import (
    GenerationError,
    pending_dir,
    record_before,
)
from ansible.module_utils.lingbot_fleet.grub import (
    DEFAULT_GRUB_PATH,
    GRUB_D_DIR,
    GrubEditError,
    GrubFile,
    GrubParseError,
    GrubPlan,
    parse_grub_file,
    plan_default_grub,
    plan_grub_d,
    sourcing_order,
)

ARGUMENT_SPEC: dict[str, Any] = {
    "present": {"type": "dict", "default": {}},
    "absent": {"type": "list", "elements": "str", "default": []},
    "iommu_vendor_switch": {"type": "bool", "default": False},
    "bootloader": {"type": "str", "choices": ["auto", "grub_d", "grubby"], "default": "auto"},
    "dropin_name": {"type": "str", "default": "lingbot-fleet"},
    "update_bootloader": {"type": "bool", "default": True},
    "backup_dir": {"type": "path", "default": "/var/lib/lingbot-fleet/backup"},
    "generation_run_id": {"type": "str"},
    "generations_dir": {"type": "path", "default": "/var/lib/lingbot-fleet/generations"},
    "root": {"type": "path", "default": "/"},
    "verify": {"type": "bool", "default": False},
    "verify_gpu_numa": {"type": "bool", "default": True},
}

NVIDIA_VENDOR_ID = "0x10de"
BLS_ENTRIES_GLOB = "/boot/loader/entries/*.conf"
GRUBENV_PATHS = ("/boot/grub2/grubenv", "/boot/grub/grubenv")
DISPLAY_CLASS_PREFIX = "0x03"


class ModuleError(Exception):
    """A failure to report with fail_json: a message and extra result fields."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details


def on_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        return handle.read()


def read_optional(path: str) -> str | None:
    try:
        return read_text(path)
    except FileNotFoundError:
        return None


# --- the one place that changes anything -----------------------------------------


Runner = Callable[[list[str], "str | None"], tuple[int, str, str]]
Mover = Callable[[str, str], None]


def default_mover(src: str, dest: str) -> None:
    os.replace(src, dest)


@dataclass
class Actions:
    """Records every change and performs it only outside check mode."""

    root: str
    check_mode: bool
    backup_dir: str
    runner: Runner
    mover: Mover = default_mover
    stamp: str = field(default_factory=lambda: time.strftime("%Y%m%dT%H%M%S"))
    files: list[str] = field(default_factory=list)
    backups: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    diffs: list[dict[str, str]] = field(default_factory=list)
    sh_path: str | None = None
    generation_run_id: str | None = None
    generations_dir: str = "/var/lib/lingbot-fleet/generations"

    def record(self, paths: list[str]) -> None:
        """Record the paths in the run's generation (outside check mode)."""
        if self.check_mode or self.generation_run_id is None or not paths:
            return
        run_dir = pending_dir(self.generations_dir, self.generation_run_id, self.root)
        for path in record_before(self.generations_dir, self.generation_run_id, paths, self.root):
            saved = os.path.join(run_dir, "files", path.lstrip("/"))
            if os.path.exists(saved):
                self.backups.append(saved)

    def _backup(self, path: str) -> None:
        if self.generation_run_id is not None:
            self.record([path])
            return
        source = on_root(self.root, path)
        if not os.path.exists(source):
            return
        saved = on_root(self.root, os.path.join(self.backup_dir, self.stamp, path.lstrip("/")))
        self.backups.append(saved)
        if self.check_mode:
            return
        os.makedirs(os.path.dirname(saved), mode=0o700, exist_ok=True)
        shutil.copy2(source, saved)

    def validate(self, path: str, text: str) -> None:
        """Check new content with ``sh -n`` (read from stdin); writes nothing."""
        if self.sh_path is None:
            return
        rc, out, err = self.runner([self.sh_path, "-n"], text)
        if rc != 0:
            raise ModuleError(
                f"the new content of {path} fails 'sh -n' (shell syntax check); nothing "
                "was written. Keep the file as it is and report this with the file "
                "attached",
                rc=rc,
                stdout=out,
                stderr=err,
            )

    def write(self, path: str, before: str | None, after: str) -> None:
        self.files.append(path)
        self.diffs.append(
            {
                "before_header": path if before is not None else "/dev/null",
                "after_header": path,
                "before": before or "",
                "after": after,
            }
        )
        if self.check_mode:
            return
        self._backup(path)
        target = on_root(self.root, path)
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        mode = os.stat(target).st_mode & 0o7777 if os.path.exists(target) else 0o644
        fd, temp_path = tempfile.mkstemp(prefix=".lingbot-fleet.", dir=os.path.dirname(target))
        try:
            with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
                f.write(after)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(temp_path, mode)
            self.mover(temp_path, target)
        finally:
            if os.path.exists(temp_path):
                os.unlink(temp_path)

    def remove(self, path: str, before: str) -> None:
        self.files.append(path)
        self.diffs.append(
            {"before_header": path, "after_header": "/dev/null", "before": before, "after": ""}
        )
        if self.check_mode:
            return
        self._backup(path)
        os.unlink(on_root(self.root, path))

    def run(self, argv: list[str]) -> None:
        self.commands.append(argv)
        if self.check_mode:
            return
        rc, out, err = self.runner(argv, None)
        if rc != 0:
            raise ModuleError(
                f"{' '.join(argv)} failed with exit status {rc}; the grub defaults files "
                "are already written (previous versions in backups). Fix the cause shown "
                "in stderr and run again",
                rc=rc,
                stdout=out,
                stderr=err,
            )


# --- reading the node --------------------------------------------------------------


def read_grub_d_files(root: str) -> list[GrubFile]:
    paths = []
    if os.path.exists(on_root(root, DEFAULT_GRUB_PATH)):
        paths.append(DEFAULT_GRUB_PATH)
    for found in glob.glob(os.path.join(on_root(root, GRUB_D_DIR), "*.cfg")):
        paths.append(os.path.join(GRUB_D_DIR, os.path.basename(found)))
    return [parse_grub_file(path, read_text(on_root(root, path))) for path in sourcing_order(paths)]


def read_running(root: str) -> str:
    text = read_optional(on_root(root, "/proc/cmdline"))
    if text is None:
        raise ModuleError(f"{on_root(root, '/proc/cmdline')} is missing; is /proc mounted?")
    return text.strip()


def resolve_policy(params: dict[str, Any], root: str) -> CmdlinePolicy:
    present = dict(params["present"] or {})
    if params["iommu_vendor_switch"]:
        cpuinfo = read_optional(on_root(root, "/proc/cpuinfo"))
        if cpuinfo is None:
            raise ModuleError(
                "/proc/cpuinfo is missing, so the IOMMU vendor switch cannot be chosen; "
                "turn iommu_vendor_switch off and set intel_iommu or amd_iommu in present"
            )
        switch = iommu_vendor_switch(cpu_vendor_from_cpuinfo(cpuinfo))
        present.setdefault(switch.name, switch.value)
    return build_policy(present, params["absent"])


def pick_bootloader(params: dict[str, Any], root: str) -> str:
    if params["bootloader"] != "auto":
        return params["bootloader"]
    if os.path.exists(on_root(root, "/etc/redhat-release")):
        return "grubby"
    return "grub_d"


# --- grubby (RedHat family) --------------------------------------------------------


def parse_grubby_info(text: str) -> dict[str, list[KernelParam]]:
    """kernel path -> its parameters, from ``grubby --info=ALL``."""
    entries: dict[str, list[KernelParam]] = {}
    kernel = ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        if key == "kernel":
            kernel = value
        elif key == "args":
            entries[kernel] = parse_cmdline(value)
    return entries


def grubby_update_argv(
    grubby_path: str, entries: dict[str, list[KernelParam]], policy: CmdlinePolicy
) -> list[str] | None:
    """The grubby call that makes every entry follow the policy, None when all do."""
    add: dict[str, str] = {}
    remove: dict[str, str] = {}
    for params in entries.values():
        for wanted in policy.present:
            if not satisfies(params, wanted):
                add[wanted.render()] = ""
        for param in params:
            stripped = strip_unwanted(param, policy.absent)
            if stripped == param:
                continue
            remove[param.render()] = ""
            if stripped is not None:
                add[stripped.render()] = ""
    if not add and not remove:
        return None
    argv = [grubby_path, "--update-kernel=ALL"]
    if add:
        argv.append("--args=" + " ".join(add))
    if remove:
        argv.append("--remove-args=" + " ".join(remove))
    return argv


# --- the two modes -----------------------------------------------------------------


def plan_files(bootloader: str, root: str, policy: CmdlinePolicy, dropin_name: str) -> GrubPlan:
    if bootloader == "grub_d":
        dropin_path = os.path.join(GRUB_D_DIR, f"{dropin_name}.cfg")
        return plan_grub_d(read_grub_d_files(root), dropin_path, policy)
    text = read_optional(on_root(root, DEFAULT_GRUB_PATH))
    if text is None:
        raise ModuleError(
            f"{on_root(root, DEFAULT_GRUB_PATH)} is missing; grub2-mkconfig reads the kernel "
            "command line from it. Install grub2-tools or create it with a "
            'GRUB_CMDLINE_LINUX="" line'
        )
    return plan_default_grub(parse_grub_file(DEFAULT_GRUB_PATH, text), policy)


def configure(
    params: dict[str, Any],
    actions: Actions,
    find_bin: Callable[[str], str | None],
) -> dict[str, Any]:
    """Bring the boot configuration in line with the policy; returns the result."""
    root = params["root"]
    policy = resolve_policy(params, root)
    bootloader = pick_bootloader(params, root)
    actions.sh_path = find_bin("sh")
    update_path = None
    if params["update_bootloader"]:
        command = "update-grub" if bootloader == "grub_d" else "grubby"
        update_path = find_bin(command)
        if update_path is None:
            package = "grub2-common" if bootloader == "grub_d" else "grubby"
            raise ModuleError(
                f"{command} was not found on the node (searched PATH and the sbin "
                f"directories); nothing was written. Install {package}, or set "
                "update_bootloader to false to edit the files only"
            )
    running_text = read_running(root)
    plan = plan_files(bootloader, root, policy, params["dropin_name"])
    grubby_argv = None
    if bootloader == "grubby" and update_path is not None:
        rc, out, err = actions.runner([update_path, "--info=ALL"], None)
        if rc != 0:
            raise ModuleError(
                f"{update_path} --info=ALL failed with exit status {rc}; nothing was written. "
                "Check the boot entries under /boot/loader/entries",
                rc=rc,
                stdout=out,
                stderr=err,
            )
        grubby_argv = grubby_update_argv(update_path, parse_grubby_info(out), policy)
    for path, new_text in plan.new_texts.items():
        if new_text is not None:
            actions.validate(path, new_text)
    # Every file goes into the run's generation before the first one is written.
    actions.record(list(plan.new_texts))
    for path, new_text in plan.new_texts.items():
        before = read_optional(on_root(root, path))
        if new_text is None:
            actions.remove(path, before or "")
        else:
            actions.write(path, before, new_text)
    if bootloader == "grub_d" and plan.new_texts and update_path is not None:
        actions.run([update_path])
    if grubby_argv is not None:
        actions.record(boot_entry_paths(root))
        actions.run(grubby_argv)
    return result_for(policy, plan, running_text, actions)


def boot_entry_paths(root: str) -> list[str]:
    """The files grubby edits: BLS entries and grubenv (node paths)."""
    found = sorted(glob.glob(on_root(root, BLS_ENTRIES_GLOB)))
    paths = [os.path.join(os.path.dirname(BLS_ENTRIES_GLOB), os.path.basename(p)) for p in found]
    return paths + [p for p in GRUBENV_PATHS if os.path.isfile(on_root(root, p))]


def result_for(
    policy: CmdlinePolicy, plan: GrubPlan, running_text: str, actions: Actions
) -> dict[str, Any]:
    running = parse_cmdline(running_text)
    report = check_policy(running, policy)
    return {
        "changed": bool(actions.files or actions.commands),
        "configured": [param.render() for param in plan.configured],
        "running": split_words(running_text),
        "reboot_required": not report.compliant,
        "missing_running": [param.render() for param in report.missing],
        "unwanted_running": [param.render() for param in report.unwanted],
        "files": actions.files,
        "backups": actions.backups,
        "commands": actions.commands,
        "diff": actions.diffs,
    }


def read_sysfs_value(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def collect_evidence(root: str) -> dict[str, Any]:
    groups_dir = on_root(root, "/sys/kernel/iommu_groups")
    group_types: dict[str, str | None] = {}
    for group in sorted(glob.glob(os.path.join(groups_dir, "*")), key=_numeric_key):
        group_types[os.path.basename(group)] = read_sysfs_value(os.path.join(group, "type"))
    gpus = []
    for device in sorted(glob.glob(os.path.join(on_root(root, "/sys/bus/pci/devices"), "*"))):
        vendor = read_sysfs_value(os.path.join(device, "vendor"))
        device_class = read_sysfs_value(os.path.join(device, "class")) or ""
        if vendor != NVIDIA_VENDOR_ID or not device_class.startswith(DISPLAY_CLASS_PREFIX):
            continue
        numa_text = read_sysfs_value(os.path.join(device, "numa_node"))
        numa_node = int(numa_text) if numa_text and numa_text.lstrip("-").isdigit() else None
        gpus.append({"bdf": os.path.basename(device), "numa_node": numa_node})
    return {
        "cmdline": read_running(root),
        "iommu_group_types": group_types,
        "gpus": gpus,
    }


def _numeric_key(path: str) -> tuple[int, str]:
    name = os.path.basename(path)
    return (int(name), name) if name.isdigit() else (1 << 30, name)


def verification_problems(
    policy: CmdlinePolicy, evidence: dict[str, Any], *, require_gpu_numa: bool
) -> list[str]:
    running = parse_cmdline(evidence["cmdline"])
    report = check_policy(running, policy)
    problems = [f"{param.render()} is missing from /proc/cmdline" for param in report.missing]
    problems += [f"{param.render()} is in /proc/cmdline" for param in report.unwanted]
    wants_passthrough = satisfies(policy.present, parse_word("iommu=pt"))
    if wants_passthrough:
        for group, group_type in evidence["iommu_group_types"].items():
            if group_type != "identity":
                problems.append(
                    f"IOMMU group {group} has type {group_type!r}, not 'identity', "
                    "though iommu=pt is asked"
                )
    switches = [p for p in policy.present if p.key in ("intel_iommu", "amd_iommu")]
    if any(p.value == "on" for p in switches) and not evidence["iommu_group_types"]:
        problems.append(
            "no IOMMU groups under /sys/kernel/iommu_groups, though the IOMMU is switched on"
        )
    if require_gpu_numa:
        for gpu in evidence["gpus"]:
            if gpu["numa_node"] is None or gpu["numa_node"] < 0:
                problems.append(
                    f"GPU {gpu['bdf']} has numa_node {gpu['numa_node']} (the firmware's "
                    "NUMA information is not in effect; pci=noacpi does this)"
                )
    return problems


def verify(params: dict[str, Any]) -> dict[str, Any]:
    root = params["root"]
    policy = resolve_policy(params, root)
    evidence = collect_evidence(root)
    problems = verification_problems(policy, evidence, require_gpu_numa=params["verify_gpu_numa"])
    report = check_policy(parse_cmdline(evidence["cmdline"]), policy)
    result = {
        "changed": False,
        "running": split_words(evidence["cmdline"]),
        "missing_running": [param.render() for param in report.missing],
        "unwanted_running": [param.render() for param in report.unwanted],
        "evidence": evidence,
        "problems": problems,
    }
    if problems:
        raise ModuleError(
            "the running kernel does not follow the kernel command-line policy: "
            + "; ".join(problems),
            **result,
        )
    return result


def run_module() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.run_command_environ_update = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}

    def runner(argv: list[str], stdin_text: str | None) -> tuple[int, str, str]:
        return module.run_command(argv, data=stdin_text, binary_data=True)

    def mover(src: str, dest: str) -> None:
        module.atomic_move(src, dest)

    def find_bin(name: str) -> str | None:
        return module.get_bin_path(name)

    try:
        if module.params["verify"]:
            result = verify(module.params)
        else:
            actions = Actions(
                root=module.params["root"],
                check_mode=module.check_mode,
                backup_dir=module.params["backup_dir"],
                runner=runner,
                mover=mover,
                generation_run_id=module.params["generation_run_id"],
                generations_dir=module.params["generations_dir"],
            )
            result = configure(module.params, actions, find_bin)
            if not module._diff:
                result.pop("diff")
    except ModuleError as error:
        module.fail_json(msg=error.msg, **error.details)
    except (PolicyError, GrubParseError, GrubEditError, GenerationError) as error:
        message = str(error)
        if "nothing was written" not in message:
            message += " Nothing was written."
        module.fail_json(msg=message)
    module.exit_json(**result)


def main() -> None:
    run_module()


if __name__ == "__main__":
    main()
