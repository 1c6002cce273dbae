"""The node's kernel log, as /dev/kmsg gives it (CONTRACT.md, "Kernel log").

A container has no kernel log of its own, so the firmware writes one per boot to
/run/lingbot-lab/kmsg - the kernel's banner, the NVIDIA module's load line when the driver
loads, and an Xid line for each GPU a fault has lost or an ``xid`` fault names - and points
/dev/kmsg at it. Each line is a kmsg record: ``<priority>,<sequence>,<microseconds since
boot>,-;<text>``. Microseconds count from the host's boot (the container's /proc/uptime is
the host's), so the age a reader computes is the time since the line was written.
lingbot-lab-incident appends records while the node runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lingbot_lab.grubcfg import write_atomically

KMSG_NAME = "kmsg"
DEV_KMSG = "/dev/kmsg"
PRIORITY_INFO = 6
PRIORITY_ERROR = 3
# The driver's own words for the Xid codes the lab raises by itself.
XID_TEXT = {79: "GPU has fallen off the bus."}


def uptime_s() -> float:
    """The kernel's uptime (a container's /proc/uptime is the host's)."""
    with open("/proc/uptime", encoding="ascii") as uptime:
        return float(uptime.read().split()[0])


def record(sequence: int, since_boot_s: float, text: str, priority: int = PRIORITY_INFO) -> str:
    return f"{priority},{sequence},{int(since_boot_s * 1e6)},-;{text}\n"


def xid_text(bdf: str, code: int, message: str | None = None) -> str:
    """The driver's Xid line for the GPU at ``bdf`` ('0000:41:00.0')."""
    words = message or XID_TEXT.get(code, f"Xid {code} event")
    bus = bdf.rsplit(".", maxsplit=1)[0]
    return f"NVRM: Xid (PCI:{bus}): {code}, pid='<unknown>', name=<unknown>, {words}"


def boot_lines(
    profile: dict[str, Any], state: dict[str, Any], release: str | None, driver_loads: bool
) -> list[tuple[int, str]]:
    """(priority, text) of this boot's kernel log."""
    lines = [(PRIORITY_INFO, f"Linux version {release or 'unknown'} (lingbot lab) #1 SMP")]
    if not driver_loads:
        return lines
    version = profile["driver"]["version"]
    lines.append((PRIORITY_INFO, f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {version}"))
    for gpu in state["gpus"]:
        if gpu["lost"]:
            lines.append((PRIORITY_ERROR, xid_text(gpu["bdf"], 79)))
    for fault in profile["faults"]:
        if fault["kind"] == "xid":
            bdf = state["gpus"][fault["gpu"]]["bdf"]
            lines.append((PRIORITY_ERROR, xid_text(bdf, fault["code"], fault.get("message"))))
    return lines


def write_boot_log(lab: Path, lines: list[tuple[int, str]], now_s: float) -> None:
    """The kmsg file of a new boot, its records a millisecond apart up to ``now_s``."""
    start_s = max(0.0, now_s - len(lines) / 1000)
    text = "".join(
        record(sequence, start_s + sequence / 1000, line, priority)
        for sequence, (priority, line) in enumerate(lines)
    )
    write_atomically(lab / KMSG_NAME, text)


def append(lab: Path, text: str, now_s: float, priority: int = PRIORITY_ERROR) -> None:
    """One more record at ``now_s`` (written whole, so a reader never sees half of it)."""
    path = lab / KMSG_NAME
    existing = path.read_text(encoding="utf-8") if path.exists() else ""
    sequence = existing.count("\n")
    write_atomically(path, existing + record(sequence, now_s, text, priority))


def link_dev_kmsg(lab_dir: str) -> None:
    """/dev/kmsg -> the lab's kmsg (the container's /dev is its own tmpfs)."""
    if os.path.lexists(DEV_KMSG):
        os.unlink(DEV_KMSG)
    os.symlink(f"{lab_dir}/{KMSG_NAME}", DEV_KMSG)
