"""Xid events from the kernel log (/dev/kmsg): what the NVIDIA driver says went wrong.

The driver logs each GPU error as an Xid line, e.g.
``NVRM: Xid (PCI:0000:41:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``
(older drivers leave out ``PCI:``, the pid and the name). /dev/kmsg gives one record per
read, ``<priority>,<sequence>,<microseconds since boot>,<flags>;<text>``, from the oldest
the ring buffer still holds; reading it does not consume it (unlike ``dmesg -c``). A
record overwritten while it is read (EPIPE) is skipped. Reading needs CAP_SYSLOG where
``kernel.dmesg_restrict`` is set, and a sandbox with ProtectKernelLogs hides the device:
then, or when the log gave no record at all (a live kernel always has its boot lines), the
log is unreadable - said so, never read as "no Xid". An Xid line the toolkit cannot parse
is kept (a few) so it is named, never dropped. Stdlib only.
"""

from __future__ import annotations

import errno
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import sysfs

KMSG_PATH = "/dev/kmsg"
UPTIME_PATH = "/proc/uptime"
# The newest this many Xid events, and this many unparsed Xid lines, are kept.
XID_EVENTS_KEPT = 64
UNPARSED_LINES_KEPT = 8
RECORD_BYTES_MAX = 8192

_RECORD = re.compile(r"^(?P<priority>\d+),(?P<sequence>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)$")
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<bus>[0-9A-Fa-f]+(?::[0-9A-Fa-f]+){1,2}(?:\.[0-7])?)\): "
    r"(?P<code>\d+)(?P<rest>.*)$"
)
_PID = re.compile(r"^, pid=(?P<pid>[^,]*)")
_NAME = re.compile(r"^, name=(?P<name>[^,]*)")


def read_kernel_log(root: str | Path = "/", now_s: float | None = None) -> dict[str, Any]:
    """``{source, readable, error, xid_events, xid_event_count, unparsed}``: every Xid
    line the kernel log holds, newest ``XID_EVENTS_KEPT`` kept, each with its code, bus
    id, process, message and time (seconds since boot, UTC, age)."""
    path = sysfs.under(root, KMSG_PATH)
    facts: dict[str, Any] = {
        "source": KMSG_PATH,
        "readable": False,
        "error": None,
        "xid_events": [],
        "xid_event_count": 0,
        "unparsed": [],
    }
    try:
        records = _read_records(path)
    except OSError as error:
        facts["error"] = f"{KMSG_PATH}: {error.strerror or error}"
        return facts
    if not records:
        facts["error"] = f"{KMSG_PATH}: the kernel log gave no records"
        return facts
    facts["readable"] = True
    uptime_s = _uptime_s(root)
    wall_now_s = time.time() if now_s is None else now_s
    events = []
    for record in records:
        match = _RECORD.match(record)
        if match is None or "NVRM: Xid" not in match["text"]:
            continue
        event = parse_xid_line(match["text"])
        if event is None:
            facts["unparsed"] = [*facts["unparsed"], match["text"][:300]][-UNPARSED_LINES_KEPT:]
            continue
        since_boot_s = int(match["usec"]) / 1e6
        event["seconds_since_boot"] = round(since_boot_s, 3)
        if uptime_s is not None:
            age_s = max(0.0, uptime_s - since_boot_s)
            event["age_s"] = round(age_s, 1)
            event["time"] = _utc_text(wall_now_s - age_s)
        else:
            event["age_s"] = None
            event["time"] = None
        events.append(event)
    facts["xid_event_count"] = len(events)
    facts["xid_events"] = events[-XID_EVENTS_KEPT:]
    return facts


def parse_xid_line(text: str) -> dict[str, Any] | None:
    """An Xid line's ``{xid, bus_id, pid, process, message}``, or None when ``text`` is not
    one the toolkit can read. ``bus_id`` is ``dddd:bb:dd`` (lower case, no function)."""
    match = _XID.search(text)
    if match is None:
        return None
    bus_id = normalize_xid_bus_id(match["bus"])
    if bus_id is None:
        return None
    rest = match["rest"]
    pid = process = None
    pid_match = _PID.match(rest)
    if pid_match:
        pid = pid_match["pid"].strip() or None
        rest = rest[pid_match.end() :]
    name_match = _NAME.match(rest)
    if name_match:
        process = name_match["name"].strip() or None
        rest = rest[name_match.end() :]
    message = rest.lstrip(", ").strip()
    return {
        "xid": int(match["code"]),
        "bus_id": bus_id,
        "pid": None if pid in (None, "'<unknown>'", "<unknown>") else pid,
        "process": None if process in (None, "<unknown>") else process,
        "message": message[:300],
    }


def normalize_xid_bus_id(text: str) -> str | None:
    """'0000:41:00', '00000000:41:00.0' or '41:00' -> '0000:41:00'; None when not a bus id."""
    parts = text.lower().split(".", maxsplit=1)[0].split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return None
    try:
        domain, bus, device = (int(part, 16) for part in parts)
    except ValueError:
        return None
    if bus > 0xFF or device > 0x1F:
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}"


def _read_records(path: Path) -> list[str]:
    """Every record the log holds, oldest first: /dev/kmsg gives one record per read and
    EAGAIN at the end (opened non-blocking); a regular file (a saved log) is read whole."""
    if path.is_file():
        text = path.read_bytes().decode(errors="replace")
        return [line for line in text.splitlines() if line and not line.startswith(" ")]
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        records = []
        while True:
            try:
                chunk = os.read(descriptor, RECORD_BYTES_MAX)
            except BlockingIOError:
                break
            except OSError as error:
                if error.errno == errno.EPIPE:  # overwritten while read: go on with the next
                    continue
                raise
            if not chunk:
                break
            records.append(chunk.decode(errors="replace").split("\n", 1)[0])
        return records
    finally:
        os.close(descriptor)


def _uptime_s(root: str | Path) -> float | None:
    try:
        return float(sysfs.under(root, UPTIME_PATH).read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _utc_text(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
