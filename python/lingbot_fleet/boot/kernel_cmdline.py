"""What the kernel_cmdline module does on a node: read the running command line and the
boot files, plan the grub or grubby change, write it through NodeChanges, prove it after a
reboot, keep its receipt. roles/kernel_cmdline/library/kernel_cmdline.py holds the
module's documentation and its entry point. Stdlib only (runs on the node)."""

from __future__ import annotations

import glob
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..facts import sysfs
from ..gpu import boot_proof
from ..node import receipts, values
from ..node.nodefiles import NodeChanges, NodeFileError, run_command
from ..node.rooted import on_root
from . import bootloader, driver_modules, kernel_options
from .bootfiles import (
    BLS_ENTRIES_DIR,
    BOOT_ID_FACT,
    BOOT_STATE_READING,
    DEFAULT_GRUB_PATH,
    GRUB_D_DIR,
    KERNEL_CMDLINE_PATH,
    BootFileError,
    boot_state_digest,
    read_boot_id,
)
from .cmdline import (
    CmdlinePolicy,
    KernelParam,
    build_policy,
    check_policy,
    cpu_vendor_from_cpuinfo,
    follow_policy,
    iommu_vendor_switch,
    parse_cmdline,
    parse_word,
    satisfies,
    split_words,
    strip_unwanted,
)
from .grub import (
    GrubFile,
    GrubPlan,
    NextBoot,
    NodeLinkError,
    next_boot,
    next_boot_gaps,
    parse_grub_file,
    plan_default_grub,
    plan_grub_d,
    read_bls_grubenv,
    read_grubenv,
    reboot_pending,
    resolve_node_path,
    sourcing_order,
)

ARGUMENT_SPEC = kernel_options.ARGUMENT_SPEC

NVIDIA_VENDOR_ID = "0x10de"
GRUBENV_PATHS = ("/boot/grub2/grubenv", "/boot/grub/grubenv")
DISPLAY_CLASS_PREFIX = "0x03"

FindBin = Callable[[str], "str | None"]


class ModuleError(Exception):
    """A failure to report with fail_json: a message and extra result fields."""

    def __init__(self, msg: str, **details: Any) -> None:
        super().__init__(msg)
        self.msg = msg
        self.details = details


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as handle:
        return handle.read()


def read_optional(path: str) -> str | None:
    try:
        return read_text(path)
    except FileNotFoundError:
        return None


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


# --- which boot loader -------------------------------------------------------------


def detect_bootloader(choice: str, root: str, find_bin: FindBin) -> str:
    """grub_d or grubby: what this node boots from (see the bootloader option)."""
    try:
        return bootloader.detect(choice, root, find_bin)
    except bootloader.BootloaderError as error:
        raise ModuleError(
            f"{error}; nothing was written. Set bootloader (kernel_cmdline_bootloader) to "
            "grub_d or grubby"
        ) from error


def require_bin(find_bin: FindBin, bootloader: str) -> str:
    command = "update-grub" if bootloader == "grub_d" else "grubby"
    found = find_bin(command)
    if found is None:
        package = "grub2-common" if bootloader == "grub_d" else "grubby"
        raise ModuleError(
            f"{command} was not found on the node (searched PATH and the sbin "
            f"directories); nothing was written. Install {package}, or set "
            "update_bootloader to false to edit the files only"
        )
    return found


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


def grubby_paths(root: str) -> list[str]:
    """The files ``grubby --update-kernel=ALL`` may change (node paths, links not yet
    followed): the BLS entries, grubenv (kernelopts) and, on RHEL 8.3 and later,
    /etc/default/grub's GRUB_CMDLINE_LINUX."""
    found = sorted(glob.glob(os.path.join(on_root(root, BLS_ENTRIES_DIR), "*.conf")))
    paths = [os.path.join(BLS_ENTRIES_DIR, os.path.basename(p)) for p in found]
    paths += [p for p in GRUBENV_PATHS if os.path.lexists(on_root(root, p))]
    return paths + [p for p in (DEFAULT_GRUB_PATH,) if os.path.lexists(on_root(root, p))]


# --- writing the grub defaults files ------------------------------------------------


def read_grub_file(root: str, path: str) -> str | None:
    """A grub defaults file's text (None when it does not exist); one that cannot be read
    (a directory, a symlink loop, no permission) is refused before anything is written."""
    try:
        return read_optional(on_root(root, path))
    except OSError as error:
        raise ModuleError(
            f"{on_root(root, path)} cannot be read ({error.strerror or error}); grub's "
            "configuration scripts source it, so move it away or make it a readable regular "
            "file. Nothing was written."
        ) from error


def read_grub_d_files(root: str) -> list[GrubFile]:
    paths = []
    if os.path.lexists(on_root(root, DEFAULT_GRUB_PATH)):
        paths.append(DEFAULT_GRUB_PATH)
    for found in glob.glob(os.path.join(on_root(root, GRUB_D_DIR), "*.cfg")):
        paths.append(os.path.join(GRUB_D_DIR, os.path.basename(found)))
    files = []
    for path in sourcing_order(paths):
        text = read_grub_file(root, path)
        if text is not None:
            files.append(parse_grub_file(path, text))
    return files


def refuse_linked_dropin(root: str, dropin_path: str) -> None:
    """The toolkit's drop-in is a regular file it owns: a symbolic link there would make
    the module (root) write wherever the link points, so it is refused before anything is
    read or written."""
    real = on_root(root, dropin_path)
    if os.path.islink(real):
        raise ModuleError(
            f"{dropin_path} is a symbolic link (to {os.readlink(real)}); the toolkit's drop-in "
            "is a regular file it owns, and writing through the link would change another "
            "file as root. Remove the link (or set kernel_cmdline_dropin_name to another "
            "name) and run again. Nothing was written."
        )


def plan_files(bootloader: str, root: str, policy: CmdlinePolicy, dropin_name: str) -> GrubPlan:
    if bootloader == "grub_d":
        dropin_path = os.path.join(
            GRUB_D_DIR, f"{values.file_name(dropin_name, kernel_options.DROPIN_NAME_VARIABLE)}.cfg"
        )
        refuse_linked_dropin(root, dropin_path)
        return plan_grub_d(read_grub_d_files(root), dropin_path, policy)
    text = read_grub_file(root, DEFAULT_GRUB_PATH)
    if text is None:
        raise ModuleError(
            f"{on_root(root, DEFAULT_GRUB_PATH)} is missing; grub2-mkconfig reads the kernel "
            "command line from it. Install grub2-tools or create it with a "
            'GRUB_CMDLINE_LINUX="" line'
        )
    return plan_default_grub(parse_grub_file(DEFAULT_GRUB_PATH, text), policy)


def shell_syntax_check(sh_path: str | None, path: str) -> Callable[[str], None] | None:
    """A NodeChanges validator: ``sh -n`` on the new content (the temp file)."""
    if sh_path is None:
        return None

    def validate(temp_path: str) -> None:
        done = run_command([sh_path, "-n", temp_path], check=False)
        if done.rc != 0:
            raise NodeFileError(
                f"the new content of {path} fails 'sh -n' (shell syntax check), so {path} "
                f"was not written ({done.stderr.strip()}). Keep the file as it is and report "
                "this with the file attached"
            )

    return validate


@dataclass(frozen=True)
class Write:
    """One file to change: the path the plan names, the file that really changes (the
    target when the path is a symbolic link), and its new text (None: remove it)."""

    path: str
    target: str
    text: str | None


def follow_link(root: str, path: str) -> str:
    """The file a write or a record of ``path`` goes to; ModuleError before any write
    when it is a link that cannot be followed."""
    try:
        return resolve_node_path(root, path)
    except NodeLinkError as error:
        raise ModuleError(f"{error}; nothing was written") from error


def resolve_writes(root: str, texts: dict[str, str | None]) -> list[Write]:
    """Every planned file with the file it really changes, checked before any write."""
    writes = []
    for path, text in texts.items():
        if text is None and os.path.islink(on_root(root, path)):
            raise ModuleError(
                f"{path} is a symbolic link and should be removed; nothing was written. "
                "The toolkit removes only the file it wrote there: remove the link by hand"
            )
        target = path if text is None else follow_link(root, path)
        writes.append(Write(path, target, text))
    return writes


def written_so_far(changes: NodeChanges) -> str:
    """The sentence that says truthfully what a failed call already changed."""
    written = [] if changes.check_mode else changes.changed_paths
    return f" Already written: {', '.join(written)}." if written else " Nothing was written."


def write_files(changes: NodeChanges, writes: list[Write], sh_path: str | None) -> None:
    try:
        for write in writes:
            write_one(changes, write, sh_path)
    except NodeFileError as error:
        raise ModuleError(
            f"{error}.{written_so_far(changes)}",
            changed=changes.changed,
            changed_paths=changes.changed_paths,
        ) from error


def write_one(changes: NodeChanges, write: Write, sh_path: str | None) -> None:
    """Write (or remove, for None) one file, keeping its mode and owner. A grub defaults
    file must pass ``sh -n``; through a link, the link's target is written."""
    if write.text is None:
        changes.remove_file(write.path)
        return
    mode, uid, gid = 0o644, 0, 0
    if os.path.exists(changes.real(write.target)):
        info = os.stat(changes.real(write.target))
        mode, uid, gid = info.st_mode & 0o7777, info.st_uid, info.st_gid
    is_shell = write.path.startswith(DEFAULT_GRUB_PATH)
    changes.write_file(
        write.target,
        write.text.encode("utf-8", "surrogateescape"),
        mode=mode,
        owner=uid,
        group=gid,
        validate=shell_syntax_check(sh_path, write.path) if is_shell else None,
    )


# --- configure ---------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One configure call: what was asked and what was read before anything changed."""

    params: dict[str, Any]
    changes: NodeChanges
    find_bin: FindBin
    policy: CmdlinePolicy
    plan: GrubPlan
    running_text: str
    sh_path: str | None

    @property
    def root(self) -> str:
        return self.params["root"]


def configure(params: dict[str, Any], changes: NodeChanges, find_bin: FindBin) -> dict[str, Any]:
    """Bring the boot configuration in line with the policy; returns the result."""
    root = params["root"]
    policy = resolve_policy(params, root)
    bootloader = detect_bootloader(params["bootloader"], root, find_bin)
    job = Job(
        params=params,
        changes=changes,
        find_bin=find_bin,
        policy=policy,
        plan=plan_files(bootloader, root, policy, params["dropin_name"]),
        running_text=read_running(root),
        sh_path=find_bin("sh"),
    )
    boot = configure_grub_d(job) if bootloader == "grub_d" else configure_grubby(job)
    return result_for(job, bootloader, boot)


def configure_grub_d(job: Job) -> NextBoot:
    """Files, then update-grub when they changed or grub.cfg does not boot them."""
    changes = job.changes
    boot = next_boot(job.root, job.running_text)
    gaps = next_boot_gaps(boot, job.plan.configured, job.policy)
    regenerate = job.params["update_bootloader"] and bool(job.plan.new_texts or gaps)
    update_grub = require_bin(job.find_bin, "grub_d") if regenerate else None
    write_files(changes, resolve_writes(job.root, job.plan.new_texts), job.sh_path)
    if update_grub is None:
        return boot
    reason = f" (the default entry of {boot.source} {', '.join(gaps)})" if gaps else ""
    try:
        changes.run([update_grub], f"run update-grub{reason}")
    except NodeFileError as error:
        raise ModuleError(
            f"{error}. The grub defaults files are written; grub.cfg is regenerated by the "
            "next run. Fix the cause and run again",
            changed=True,
            changed_paths=changes.changed_paths,
        ) from error
    if changes.check_mode:
        return boot
    boot = next_boot(job.root, job.running_text)
    gaps = next_boot_gaps(boot, job.plan.configured, job.policy)
    if gaps:
        raise ModuleError(
            f"update-grub ran, but the default entry of {boot.source} ({boot.entry}) still "
            f"{', '.join(gaps)}: grub does not boot what the grub defaults files configure. "
            "Check GRUB_DEFAULT and the scripts in /etc/grub.d, then run again",
            changed=True,
            next_boot=list(boot.args or ()),
        )
    return boot


def configure_grubby(job: Job) -> NextBoot:
    """/etc/default/grub and /etc/kernel/cmdline (future kernels), then grubby when a boot
    entry, or the kernelopts its entries take, misses the policy.

    Everything that can fail before a write is checked first: the grubby run it needs,
    every link on the way to a file that changes or is recorded. Then the files grubby
    changes are recorded, the files are written and grubby runs.
    """
    changes = job.changes
    texts = dict(job.plan.new_texts)
    kernel_cmdline = plan_kernel_cmdline(job.root, job.policy)
    if kernel_cmdline is not None:
        texts[KERNEL_CMDLINE_PATH] = kernel_cmdline
    argv = grubby_argv(job) if job.params["update_bootloader"] else None
    writes = resolve_writes(job.root, texts)
    recorded = [follow_link(job.root, path) for path in grubby_paths(job.root)] if argv else []
    try:
        changes.record(recorded)
    except NodeFileError as error:
        raise ModuleError(f"{error}.{written_so_far(changes)}") from error
    write_files(changes, writes, job.sh_path)
    if argv is None:
        return next_boot(job.root, job.running_text)
    try:
        changes.run(argv, "run grubby " + " ".join(argv[1:]))
    except NodeFileError as error:
        raise ModuleError(
            f"{error}.{written_so_far(changes)} The boot entries may be partly updated; the "
            "next run updates them again. Fix the cause and run again",
            changed=True,
            changed_paths=changes.changed_paths,
        ) from error
    boot = next_boot(job.root, job.running_text)
    if not changes.check_mode and boot.args is not None:
        report = check_policy(parse_cmdline(" ".join(boot.args)), job.policy)
        if not report.compliant:
            problems = [f"lacks {p.render()}" for p in report.missing]
            problems += [f"holds {p.render()}" for p in report.unwanted]
            raise ModuleError(
                f"grubby ran, but the default boot entry {boot.source} still "
                f"{', '.join(problems)}. Check it with grubby --info=DEFAULT, then run again",
                changed=True,
            )
    return boot


def plan_kernel_cmdline(root: str, policy: CmdlinePolicy) -> str | None:
    """RHEL 9's /etc/kernel/cmdline made to follow the policy (kernel-install gives its
    words to every new kernel); None when there is none or it already follows."""
    text = read_optional(on_root(root, resolve_node_path(root, KERNEL_CMDLINE_PATH)))
    if text is None:
        return None
    line, newline, rest = text.partition("\n")
    if rest.strip():
        raise ModuleError(
            f"{KERNEL_CMDLINE_PATH} has more than one line; kernel-install reads it as one "
            "command line. Join its lines into one and run again. Nothing was written"
        )
    new_line = follow_policy(line, policy)
    if split_words(new_line) == split_words(line):
        return None
    return new_line + (newline or "\n")


def grubby_argv(job: Job) -> list[str] | None:
    """The grubby call the boot entries need (None: they all follow the policy), from
    grubby's own view of every entry and from what the default entry really boots
    ($kernelopts expanded from grubenv)."""
    grubby = require_bin(job.find_bin, "grubby")
    info = run_command([grubby, "--info=ALL"], check=False)
    if info.rc != 0:
        raise ModuleError(
            f"{grubby} --info=ALL failed with exit status {info.rc}; nothing was written. "
            "Check the boot entries under /boot/loader/entries",
            rc=info.rc,
            stdout=info.stdout,
            stderr=info.stderr,
        )
    entries = parse_grubby_info(info.stdout)
    boot = next_boot(job.root, job.running_text)
    if boot.args is not None:
        entries[f"default entry {boot.source}"] = parse_cmdline(" ".join(boot.args))
    grubenv_path, grubenv_text = read_bls_grubenv(job.root)
    kernelopts = read_grubenv(grubenv_text or "").get("kernelopts")
    if kernelopts is not None and entries_take_kernelopts(job.root):
        entries[f"kernelopts of {grubenv_path}"] = parse_cmdline(kernelopts)
    return grubby_update_argv(grubby, entries, job.policy)


def entries_take_kernelopts(root: str) -> bool:
    """Whether a BLS entry's options use grubenv's $kernelopts (RHEL 8): then grubby
    --update-kernel=ALL edits kernelopts, which new kernels' entries take too."""
    for found in glob.glob(os.path.join(on_root(root, BLS_ENTRIES_DIR), "*.conf")):
        for line in read_text(found).splitlines():
            words = line.split()
            if words[:1] == ["options"] and any(
                word in ("$kernelopts", "${kernelopts}") for word in words[1:]
            ):
                return True
    return False


def result_for(job: Job, bootloader: str, boot: NextBoot) -> dict[str, Any]:
    report = check_policy(parse_cmdline(job.running_text), job.policy)
    params = job.params
    result = job.changes.result()
    if job.changes.recorded:
        # Imported here: a call that records nothing does not load the generations code.
        from ..node.generations import pending_dir  # noqa: PLC0415

        saved = os.path.join(
            pending_dir(params["generations_dir"], params["generation_run_id"], job.root),
            "files",
        )
        result["backups"] = [
            os.path.join(saved, path.lstrip("/"))
            for path in job.changes.recorded
            if os.path.exists(os.path.join(saved, path.lstrip("/")))
        ]
    configured = [param.render() for param in job.plan.configured]
    running = split_words(job.running_text)
    result.update(
        {
            "bootloader": bootloader,
            "configured": configured,
            "next_boot": list(boot.args) if boot.args is not None else None,
            "next_boot_source": boot.source,
            "running": running,
            "reboot_required": not report.compliant,
            "missing_running": [param.render() for param in report.missing],
            "unwanted_running": [param.render() for param in report.unwanted],
        }
    )
    result.setdefault("ansible_facts", {}).update(
        {
            "kernel_cmdline_reboot_required": not report.compliant,
            "kernel_cmdline_configured": configured,
            "kernel_cmdline_running": running,
        }
    )
    return result


# --- verify ------------------------------------------------------------------------


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


def configuration_problems(root: str, running_text: str) -> list[str]:
    """How the running kernel differs from what the boot configuration boots."""
    boot = next_boot(root, running_text)
    if boot.args is None:
        return ["the boot configuration has no default entry to compare /proc/cmdline with"]
    if not reboot_pending(running_text, boot):
        return []
    return [
        f"/proc/cmdline ({running_text}) is not what the default entry of {boot.source} "
        f"boots ({' '.join(boot.args)}): the node did not boot its configuration"
    ]


def verify(params: dict[str, Any]) -> dict[str, Any]:
    root = params["root"]
    policy = resolve_policy(params, root)
    evidence = collect_evidence(root)
    if params["verify_against"] == "configuration":
        problems = configuration_problems(root, evidence["cmdline"])
    else:
        problems = verification_problems(
            policy, evidence, require_gpu_numa=params["verify_gpu_numa"]
        )
    gpu_problems: list[str] = []
    if params["verify_gpus"]:
        gpu_problems, evidence["gpu_proof"] = boot_proof.gpu_problems(
            root, params["verify_gpus_before"]
        )
    report = check_policy(parse_cmdline(evidence["cmdline"]), policy)
    running = split_words(evidence["cmdline"])
    result = {
        "changed": False,
        "running": running,
        "missing_running": [param.render() for param in report.missing],
        "unwanted_running": [param.render() for param in report.unwanted],
        "evidence": evidence,
        "problems": problems + gpu_problems,
    }
    sentences = []
    if problems:
        against = "policy" if params["verify_against"] == "policy" else "boot configuration"
        sentences.append(
            f"the running kernel does not follow the kernel command-line {against}: "
            + "; ".join(problems)
        )
    if gpu_problems:
        sentences.append("the GPUs did not come back: " + "; ".join(gpu_problems))
    if sentences:
        raise ModuleError(". ".join(sentences), **result)
    result["ansible_facts"] = {
        "kernel_cmdline_reboot_required": False,
        "kernel_cmdline_running": running,
        BOOT_ID_FACT: read_boot_id(root),
    }
    return result


# --- before a reboot ---------------------------------------------------------------


def guard_reboot(params: dict[str, Any]) -> dict[str, Any]:
    """Whether rebooting now boots what the GPUs survive: the default boot entry holds the
    policy (not asked with ``verify_against: configuration``: a rollback reboots into
    whatever configuration it restored), and, with NVIDIA GPUs on the PCI bus, its kernel
    has the NVIDIA module built for it (``driver_modules``). Reads only; raises ModuleError
    naming the entry, the kernel and the fix when the reboot must not happen. A kernel
    the entry does not name is reported (``next_boot_driver.note``) and does not stop the
    reboot: the proof after it still holds the node to its GPUs."""
    root = params["root"]
    policy = resolve_policy(params, root)
    running_text = read_running(root)
    boot = next_boot(root, running_text)
    gpus_on_bus = sysfs.nvidia_gpu_bus_ids(root)
    release = driver_modules.kernel_release(boot.kernel, root)
    kernels = driver_modules.read_kernel_modules(root, release) if release else {}
    driver = driver_modules.next_boot_driver(boot.kernel, kernels, root)
    result: dict[str, Any] = {
        "changed": False,
        "running": split_words(running_text),
        "next_boot": list(boot.args) if boot.args is not None else None,
        "next_boot_source": boot.source,
        "next_boot_driver": driver,
        "gpus_on_bus": gpus_on_bus,
    }
    problems = []
    if boot.args is None:
        problems.append(
            "the boot configuration has no default entry to boot (no BLS entry, no menu entry "
            "in grub.cfg); regenerate it (update-grub, grub2-mkconfig) and run again"
        )
    elif params["verify_against"] == "policy":
        report = check_policy(parse_cmdline(" ".join(boot.args)), policy)
        misses = [f"lacks {p.render()}" for p in report.missing]
        misses += [f"holds {p.render()}" for p in report.unwanted]
        if misses:
            problems.append(
                f"the default boot entry ({boot.source}, {boot.entry}) {', '.join(misses)}: "
                "the reboot would not apply the policy; run the kernel_cmdline role again"
            )
    if gpus_on_bus and driver["problem"]:
        problems.append(f"{driver['problem']}. Fix: {driver['fix']}")
    if problems:
        raise ModuleError(
            "not rebooted, the node keeps running as it is: " + "; ".join(problems), **result
        )
    if driver["state"] == driver_modules.UNKNOWN and gpus_on_bus:
        result["warnings"] = [driver["note"]]
    return result


def drop_receipt(root: str) -> None:
    try:
        receipts.remove_receipt(kernel_options.RECEIPT_ROLE, root)
    except OSError as error:
        raise ModuleError(
            f"cannot remove {receipts.receipt_path(kernel_options.RECEIPT_ROLE, root)} "
            f"({error.strerror or error}); nothing was written"
        ) from error


def keep_receipt(params: dict[str, Any], changes: NodeChanges, result: dict[str, Any]) -> str:
    """The receipt of a call that changed nothing (docs/converged-runs.md): its result,
    what its NodeChanges watched, and the ``boot_state`` reading of every file the kernel
    command line is read from. Only a saving: one that cannot be written costs the next run
    this call."""
    root = params["root"]
    try:
        state = boot_state_digest(root)
    except BootFileError as error:
        return f"not written: {error}"
    return receipts.keep(
        kernel_options.RECEIPT_ROLE,
        params["receipt_digest"],
        changes,
        result,
        lambda _units: {},
        root=root,
        readings={BOOT_STATE_READING: state},
    )
