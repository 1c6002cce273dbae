"""What the audit reads on one node, in one module call. Stdlib only; reads, never writes.

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

from ..cmdline import split_words
from ..facts import gather_facts
from ..generations import list_generations
from ..grub import (
    DEFAULT_GRUB_PATH,
    GRUB_D_DIR,
    configured_params,
    next_boot,
    parse_grub_file,
    sourcing_order,
)

NODE_SCHEMA_VERSION = 1
DEFAULT_PROBE_PATH = "/var/lib/lingbot-fleet/probe/latest.json"
DEFAULT_LINGBOT_DIR = "/etc/lingbot"
DEFAULT_PLAN_PATH = "/etc/lingbot/plan.json"
DEFAULT_GENERATIONS_DIR = "/var/lib/lingbot-fleet/generations"
MAX_FILE_BYTES = 1 << 20


def on_root(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/"))


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


def next_boot_args(root: str) -> dict[str, Any]:
    """The parameters the next boot gets (grub.next_boot: the default BLS entry, else
    grub.cfg's default entry, grub's variables expanded)."""
    boot = next_boot(root)
    return {"source": boot.source, "args": list(boot.args) if boot.args is not None else None}


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


def cpu_vendor(root: str) -> str | None:
    for line in (read_text(on_root(root, "/proc/cpuinfo")) or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return None


def kernel_section(root: str) -> dict[str, Any]:
    running = read_text(on_root(root, "/proc/cmdline"))
    next_boot = next_boot_args(root)
    return {
        "running": split_words(running.strip()) if running is not None else None,
        "next_boot": next_boot["args"],
        "next_boot_source": next_boot["source"],
        "grub_defaults": _section(lambda: grub_defaults_args(root)),
        "cpu_vendor": cpu_vendor(root),
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


def collect_node(
    *,
    root: str = "/",
    nvml: str = "auto",
    nvml_python_path: Sequence[str] = (),
    smi_command: Sequence[str] = ("nvidia-smi",),
    probe_path: str = DEFAULT_PROBE_PATH,
    lingbot_dir: str = DEFAULT_LINGBOT_DIR,
    plan_path: str = DEFAULT_PLAN_PATH,
    generations_dir: str = DEFAULT_GENERATIONS_DIR,
) -> dict[str, Any]:
    """Everything the audit needs from the node; docs/audit.md lists the keys."""
    return {
        "schema_version": NODE_SCHEMA_VERSION,
        "facts": _section(
            lambda: gather_facts(
                root=root, nvml=nvml, nvml_python_path=nvml_python_path, smi_command=smi_command
            )
        ),
        "kernel": _section(lambda: kernel_section(root)),
        "probe": _section(lambda: read_json_file(on_root(root, probe_path))),
        "probe_path": probe_path,
        "lingbot": _section(lambda: lingbot_section(root, lingbot_dir, plan_path)),
        "generations": _section(lambda: list_generations(generations_dir, root)),
    }
