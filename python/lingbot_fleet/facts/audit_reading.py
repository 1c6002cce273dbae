"""What the audit reads on one node, in one module call. Stdlib only; reads, never writes.

Only reading runs here; what needs parsing beyond JSON (the boot files, the generations'
checks) is done on the controller from what this sends (``audit.node_document``).

Every section is collected on its own: a section that cannot be read carries an `error`
and the others still come back, so one broken file never hides the rest of the node.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from typing import Any

from ..boot.bootfiles import read_boot_files
from ..boot.driver_modules import read_kernel_modules
from ..gpu.probe_saved import LATEST_NAME
from ..node.generation_snapshot import read_generations
from ..node.rooted import on_root
from ..node.state_dirs import GENERATIONS_DIR, PROBE_DIR
from . import gather_facts

NODE_SCHEMA_VERSION = 1
DEFAULT_PROBE_PATH = f"{PROBE_DIR}/{LATEST_NAME}"
DEFAULT_GENERATIONS_DIR = GENERATIONS_DIR
DEFAULT_LINGBOT_DIR = "/etc/lingbot"
DEFAULT_PLAN_PATH = "/etc/lingbot/plan.json"
MAX_FILE_BYTES = 1 << 20


def read_text(path: str) -> str | None:
    """The file's text, None when it does not exist; OSError for anything else."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return None


def _section(collect: Callable[[], Any]) -> Any:
    """Run one collector; a failure becomes {"error": ...} instead of failing the node."""
    try:
        return collect()
    except Exception as error:  # any failure of one section is reported, not raised
        return {"error": f"{type(error).__name__}: {error}"}


# --- kernel command line ---------------------------------------------------------------
#
# The node sends its boot files' text; the controller parses them (audit.node_document):
# the grub parsers are the largest code the toolkit has, and a read-only call need not
# compile them on every node.


def cpu_vendor(root: str) -> str | None:
    for line in (read_text(on_root(root, "/proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return None


def kernel_files(root: str) -> dict[str, Any]:
    """The boot files as they are, the CPU vendor, and the NVIDIA module of every installed
    kernel (the controller finds the next boot's kernel in the boot files)."""
    return {
        "boot_files": read_boot_files(root),
        "cpu_vendor": cpu_vendor(root),
        "kernel_modules": _section(lambda: read_kernel_modules(root)),
    }


# --- probe, LingBot, generations -------------------------------------------------------


def read_json_file(path: str) -> Any:
    text = read_text(path)
    if text is None:
        return None
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return json.loads(text)


def lingbot_section(root: str, lingbot_dir: str, plan_path: str) -> dict[str, Any]:
    """The deployed LingBot configs (raw text: the controller parses YAML) and plan.json."""
    configs = {}
    pattern = os.path.join(on_root(root, lingbot_dir), "*", "config.yaml")
    for path in sorted(glob.glob(pattern)):
        instance = os.path.basename(os.path.dirname(path))
        text = read_text(path) or ""
        configs[instance] = {
            "path": os.path.join(lingbot_dir, instance, "config.yaml"),
            "sha256": hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest(),
            "text": text,
        }
    return {"configs": configs, "plan": _section(lambda: read_json_file(on_root(root, plan_path)))}


def read_node(
    *,
    root: str = "/",
    use_nvml: bool = True,
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
    probe_path: str = DEFAULT_PROBE_PATH,
    lingbot_dir: str = DEFAULT_LINGBOT_DIR,
    plan_path: str = DEFAULT_PLAN_PATH,
    generations_dir: str = DEFAULT_GENERATIONS_DIR,
) -> dict[str, Any]:
    """What the audit reads on the node, as it is: the facts, the probe and LingBot's files,
    with the kernel and generations sections still raw (``audit.node_document`` completes
    them on the controller into the document docs/audit.md describes)."""
    return {
        "schema_version": NODE_SCHEMA_VERSION,
        "facts": _section(
            lambda: gather_facts(
                root=root,
                use_nvml=use_nvml,
                nvml_python_path=nvml_python_path,
                smi_command=smi_command,
            )
        ),
        "kernel": _section(lambda: kernel_files(root)),
        "probe": _section(lambda: read_json_file(on_root(root, probe_path))),
        "probe_path": probe_path,
        "lingbot": _section(lambda: lingbot_section(root, lingbot_dir, plan_path)),
        "generations": _section(lambda: read_generations(generations_dir, root)),
    }
