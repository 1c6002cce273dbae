"""Will the next boot keep the GPU driver? The NVIDIA kernel module of each installed kernel.

A kernel update whose NVIDIA module was not built (DKMS failed, the headers were missing,
the precompiled module package lags the kernel) boots with the GPUs on the PCI bus and no
driver. Before a reboot, kernel_cmdline asks whether the default boot entry's kernel has the
module; the audit asks the same of every node. Stdlib only (runs on nodes).

Where the module lands, by who built it (``<release>`` = ``uname -r`` of that kernel):

- DKMS (Debian, Ubuntu, RHEL with EPEL's dkms): ``/lib/modules/<release>/updates/dkms/``
  (RHEL: ``extra/``); Debian names the module ``nvidia-current`` (``nvidia-tesla-<branch>``,
  ``nvidia-legacy-<branch>xx`` for the other branches), others ``nvidia``;
- precompiled packages: Ubuntu's ``linux-modules-nvidia-<branch>-<flavour>`` under
  ``kernel/nvidia-<branch>/``, RHEL's kmod packages under ``extra/``, and ``weak-updates/``
  links to another kernel's module that the kABI lets this kernel load;
- NVIDIA's .run installer: ``kernel/drivers/video/``.

Compressed (``.ko.xz``, ``.ko.zst``, ``.ko.gz``) as the distribution packs modules. The
companions (``nvidia-uvm``, ``-modeset``, ``-drm``, ``-peermem``) follow the core module and
are not asked for; ``nvidiafb`` and ``nvidia-wmi-ec-backlight`` are other drivers.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping
from typing import Any

from ..node.rooted import on_root

MODULE_DIRS = ("/lib/modules", "/usr/lib/modules")
# The core module of the NVIDIA driver, by every name a packaging gives it.
CORE_MODULE_NAME = re.compile(
    r"^nvidia(?:-current|-tesla(?:-\d+)?|-legacy-\d+xx)?\.ko(?:\.(?:xz|zst|gz))?$"
)
# Where, under a release's modules directory, an NVIDIA module is installed; and
# kernel/nvidia* (Ubuntu's precompiled packages).
SEARCHED_SUBDIRS = ("updates", "extra", "weak-updates", "kernel/drivers/video")
# Those directories hold a few hundred files; a tree far past that is not one.
MAX_WALKED_ENTRIES = 50_000
# The words a kernel image's file name starts with before its release.
IMAGE_PREFIXES = ("vmlinuz-", "vmlinux-", "kernel-", "bzImage-", "Image-")
KERNEL_RELEASE = re.compile(r"^[0-9][A-Za-z0-9._+~-]*$")

# States of the next boot's driver (``next_boot_driver``).
BUILT = "built"
MISSING = "missing"
NOT_INDEXED = "not_indexed"
UNKNOWN = "unknown"


def kernel_release(image: str | None, root: str = "/") -> str | None:
    """The release of the kernel a boot entry's image path names (``/boot/vmlinuz-6.8.0-31-
    generic`` and BLS's ``/vmlinuz-5.14.0-362.el9.x86_64`` alike); an unversioned link
    (``/vmlinuz``) is followed on the node. None when the path does not say."""
    if not image:
        return None
    name = os.path.basename(image)
    for prefix in IMAGE_PREFIXES:
        if name.startswith(prefix) and KERNEL_RELEASE.match(name[len(prefix) :]):
            return name[len(prefix) :]
    for candidate in (image, "/boot" + image if not image.startswith("/boot/") else None):
        if candidate is None:
            continue
        try:
            target = os.readlink(on_root(root, candidate))
        except OSError:
            continue
        if os.path.basename(target) != name:
            return kernel_release(os.path.basename(target))
    return None


def _indexed(modules_dep: str | None, found: list[str]) -> bool | None:
    """Whether modprobe finds one of ``found`` (modules.dep names it), None without a
    modules.dep to ask."""
    if modules_dep is None:
        return None
    listed = [line.partition(":")[0].strip() for line in modules_dep.splitlines()]
    # Paths relative to the release's directory; very old depmods wrote them absolute.
    return any(entry == path or entry.endswith("/" + path) for entry in listed for path in found)


def _read_modules_dep(directory: str) -> str | None:
    try:
        with open(os.path.join(directory, "modules.dep"), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _points_at_a_file(root: str, directory: str, path: str) -> bool:
    """A module that is a link (RHEL's weak-updates) counts when its target, read on the
    node, is a file."""
    full = os.path.join(directory, path)
    if not os.path.islink(full):
        return os.path.isfile(full)
    target = os.readlink(full)
    if os.path.isabs(target):
        return os.path.isfile(on_root(root, target))
    return os.path.isfile(os.path.join(os.path.dirname(full), target))


def read_kernel_modules(root: str = "/", release: str | None = None) -> dict[str, Any]:
    """{release: {"nvidia": [paths of the core module, relative to the release's modules
    directory], "indexed": modules.dep names one (None: no modules.dep)}} for every
    installed kernel, or for ``release`` alone (absent when it has no modules directory)."""
    kernels: dict[str, Any] = {}
    for modules_dir in MODULE_DIRS:
        base = on_root(root, modules_dir)
        try:
            releases = sorted(os.listdir(base)) if release is None else [release]
        except OSError:
            continue
        for name in releases:
            directory = os.path.join(base, name)
            if name in kernels or not os.path.isdir(directory):
                continue
            found = _core_modules(root, directory)
            kernels[name] = {
                "nvidia": found,
                "indexed": _indexed(_read_modules_dep(directory), found) if found else None,
            }
    return kernels


def _search_dirs(directory: str) -> list[str]:
    """The directories of a release's modules where an NVIDIA module is installed (see the
    module's docstring); the kernel's own tree beyond them is not walked."""
    found = [os.path.join(directory, sub) for sub in SEARCHED_SUBDIRS]
    with contextlib.suppress(OSError):
        found += sorted(
            os.path.join(directory, "kernel", name)
            for name in os.listdir(os.path.join(directory, "kernel"))
            if name.startswith("nvidia")
        )
    return [path for path in found if os.path.isdir(path)]


def _core_modules(root: str, directory: str) -> list[str]:
    found: list[str] = []
    walked = 0
    for top in _search_dirs(directory):
        for current, subdirs, files in os.walk(top):
            subdirs.sort()
            walked += len(subdirs) + len(files)
            if walked > MAX_WALKED_ENTRIES:
                return found
            for name in sorted(files):
                if CORE_MODULE_NAME.match(name):
                    relative = os.path.relpath(os.path.join(current, name), directory)
                    if _points_at_a_file(root, directory, relative):
                        found.append(relative)
    return found


def next_boot_driver(image: str | None, kernels: Mapping[str, Any], root: str = "/") -> dict:
    """What the next boot's kernel (its image path, from the default boot entry) does to the
    GPU driver, from ``read_kernel_modules``: state ``built``, ``missing`` (no NVIDIA module
    built for that kernel), ``not_indexed`` (built, but modules.dep does not list it, so
    modprobe does not find it) or ``unknown`` (the entry does not say which kernel; ``note``
    says so). When the next boot would lose the driver, ``problem`` names the kernel and
    the module, and ``fix`` says what to do: one wording for kernel_cmdline's refusal and
    the audit's finding."""
    release = kernel_release(image, root)
    result: dict[str, Any] = {
        "kernel": release,
        "image": image,
        "modules": [],
        "problem": None,
        "fix": None,
    }
    if release is None:
        result["state"] = UNKNOWN
        result["note"] = (
            f"the default boot entry's kernel ({image or 'none'}) does not name its release, "
            "so its NVIDIA module was not looked for"
        )
        return result
    entry = kernels.get(release)
    modules_dir = f"/lib/modules/{release}"
    if not entry or not entry.get("nvidia"):
        result["state"] = MISSING
        where = "has no NVIDIA kernel module" if entry else "has no modules directory"
        result["problem"] = (
            f"the next boot's kernel {release} {where} ({modules_dir}: no nvidia.ko or "
            "nvidia-current.ko in updates/dkms, extra, weak-updates or kernel/), so the GPUs "
            "would come back without their driver"
        )
        result["fix"] = (
            f"build it (dkms autoinstall -k {release}, or install the precompiled NVIDIA "
            "module package for that kernel), or make the default boot entry a kernel that "
            "has it (grub-set-default, grubby --set-default)"
        )
        return result
    result["modules"] = list(entry["nvidia"])
    if entry.get("indexed") is False:
        result["state"] = NOT_INDEXED
        result["problem"] = (
            f"the next boot's kernel {release} has an NVIDIA module ({modules_dir}/"
            f"{entry['nvidia'][0]}) that {modules_dir}/modules.dep does not list, so modprobe "
            "would not load it and the GPUs would come back without their driver"
        )
        result["fix"] = f"run depmod -a {release}"
        return result
    result["state"] = BUILT
    return result
