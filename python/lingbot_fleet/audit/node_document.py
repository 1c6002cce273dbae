"""The node document the audit judges, completed on the controller from what the node read.

``facts.audit_reading.read_node`` runs on the node and sends its boot files' text and its
generations' manifests and checksums as they are; here the grub parsers read those boot
files from a scratch root laid out like the node's, and ``generations.list_generations``
checks the generations through ``generation_snapshot.SnapshotReader``: the same functions
as on the node, with the same results. docs/audit.md lists the document's keys.
"""

from __future__ import annotations

import functools
import glob
import os
import tempfile
from collections.abc import Sequence
from typing import Any

from ..boot.bootfiles import DEFAULT_GRUB_PATH, GRUB_D_DIR, write_boot_files
from ..boot.cmdline import split_words
from ..boot.driver_modules import UNKNOWN, next_boot_driver
from ..boot.grub import configured_params, next_boot, parse_grub_file, sourcing_order
from ..facts.audit_reading import _section, on_root, read_node, read_text
from ..node.generation_snapshot import SnapshotReader
from ..node.generations import list_generations


def grub_defaults_args(root: str) -> list[str] | None:
    """GRUB_CMDLINE_LINUX then _DEFAULT after sourcing /etc/default/grub and grub.d/*.cfg."""
    paths = []
    if os.path.exists(on_root(root, DEFAULT_GRUB_PATH)):
        paths.append(DEFAULT_GRUB_PATH)
    for found in glob.glob(os.path.join(on_root(root, GRUB_D_DIR), "*.cfg")):
        paths.append(os.path.join(GRUB_D_DIR, os.path.basename(found)))
    if not paths:
        return None
    files = [
        parse_grub_file(path, read_text(on_root(root, path)) or "")
        for path in sourcing_order(paths)
    ]
    return [param.render() for param in configured_params(files)]


def kernel_section(root: str, cpu_vendor: str | None, kernel_modules: Any = None) -> dict[str, Any]:
    """The running command line, what the next boot gets (grub.next_boot: the default BLS
    entry, else grub.cfg's default entry, grub's variables expanded), what the grub
    defaults files configure, read under ``root``, and what the next boot's kernel does to
    the GPU driver (``driver_modules.next_boot_driver`` from the node's ``kernel_modules``;
    None without a default entry, or without the node's reading)."""
    running = read_text(on_root(root, "/proc/cmdline"))
    boot = next_boot(root)
    driver = None
    # Without a default entry there is no next boot to judge (kernel_state says so).
    readable = isinstance(kernel_modules, dict) and "error" not in kernel_modules
    if boot.args is not None and readable:
        driver = next_boot_driver(boot.kernel, kernel_modules, root)
    elif boot.args is not None and isinstance(kernel_modules, dict):
        driver = {
            "kernel": None,
            "image": boot.kernel,
            "modules": [],
            "state": UNKNOWN,
            "problem": None,
            "fix": None,
            "note": f"the kernels' modules could not be read: {kernel_modules['error']}",
        }
    return {
        "running": split_words(running.strip()) if running is not None else None,
        "next_boot": list(boot.args) if boot.args is not None else None,
        "next_boot_source": boot.source,
        "next_boot_driver": driver,
        "grub_defaults": _section(lambda: grub_defaults_args(root)),
        "cpu_vendor": cpu_vendor,
    }


def _kernel(read: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lingbot-boot-") as scratch:
        write_boot_files(read["boot_files"], scratch)
        return kernel_section(scratch, read.get("cpu_vendor"), read.get("kernel_modules"))


def _generations(read: dict[str, Any]) -> list[dict[str, Any]]:
    return list_generations(read["generations_dir"], read["root"], SnapshotReader(read))


def complete_node(read: dict[str, Any]) -> dict[str, Any]:
    """``read_node``'s result with its kernel and generations sections completed (a
    section the node could not read keeps its error)."""
    node = dict(read)
    for key, complete in (("kernel", _kernel), ("generations", _generations)):
        section = read.get(key)
        if isinstance(section, dict) and "error" not in section:
            node[key] = _section(functools.partial(complete, section))
    return node


def collect_node(
    *,
    root: str = "/",
    use_nvml: bool = True,
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
    probe_path: str | None = None,
    lingbot_dir: str | None = None,
    plan_path: str | None = None,
    generations_dir: str | None = None,
) -> dict[str, Any]:
    """Read and complete in one process (a node audited from its own shell, the tests)."""
    options = {
        "probe_path": probe_path,
        "lingbot_dir": lingbot_dir,
        "plan_path": plan_path,
        "generations_dir": generations_dir,
    }
    return complete_node(
        read_node(
            root=root,
            use_nvml=use_nvml,
            nvml_python_path=nvml_python_path,
            smi_command=smi_command,
            **{key: value for key, value in options.items() if value is not None},
        )
    )
