"""``lspci -vv`` / ``-vvv`` (optionally ``-nn``): per device the link, ACS and NUMA facts.

Also read, as a partial result: the ``Lnk*`` lines alone, as ``lspci -vv | grep Lnk``
prints them. Each ``LnkCap`` (or a field the current device already has) starts the
next device, whose address and identity are unknown.
"""

from __future__ import annotations

import re

from ._common import (
    ParseError,
    count_or_none,
    int_or_none,
    parse_decimal,
    parse_int,
    partial,
    require_text,
    whole,
)

KIND = "lspci"
EXPECTED = (
    "the output of `lspci -vv` or `lspci -vvv` (with or without -nn), or its Lnk* lines"
    " (`lspci -vv | grep Lnk`)"
)
FRAGMENT_NOTE = (
    "no device lines (the Lnk* lines of lspci -vv alone): each LnkCap starts the next"
    " device; bdf, description, ids, ACS, NUMA node, IOMMU group and driver are unknown"
)

ACS_FLAGS = (
    "SrcValid",
    "TransBlk",
    "ReqRedir",
    "CmpltRedir",
    "UpstreamFwd",
    "EgressCtrl",
    "DirectTrans",
)
_DEVICE_LINE_RE = re.compile(
    r"^(?P<bdf>(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]) (?P<description>.+)$"
)
# "3D controller [0302]: NVIDIA Corporation GA100 [A100 SXM4 40GB] [10de:20b0] (rev a1)"
_CLASS_RE = re.compile(r"^(?P<name>[^:\[]+?)(?: \[(?P<id>[0-9a-fA-F]{4})\])?: (?P<rest>.*)$")
_IDS_RE = re.compile(r"\[(?P<vendor>[0-9a-fA-F]{4}):(?P<device>[0-9a-fA-F]{4})\]")
# A link speed in GT/s: ASCII digits, one optional fraction, bounded (2.5, 16, 64).
_GT = r"[0-9]{1,4}(?:\.[0-9]{1,4})?"
_SPEED_RE = re.compile(r"Speed (?P<speed>[0-9.]{1,20})GT/s(?P<note> \((?:downgraded|ok)\))?")
_WIDTH_RE = re.compile(r"Width x(?P<width>[0-9]{1,20})(?P<note> \((?:downgraded|ok)\))?")
_FIELD_RE = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9 ]*?):\s*(?P<value>.*)$")


def _note_flag(note: str | None) -> bool | None:
    if not note:
        return None
    return "downgraded" in note


def _link(value: str, with_notes: bool) -> dict:
    speed = _SPEED_RE.search(value)
    width = _WIDTH_RE.search(value)
    link: dict = {
        "speed_gt_per_s": parse_decimal(speed.group("speed"), f"link speed in {value!r}")
        if speed
        else None,
        "width": parse_int(width.group("width"), f"link width in {value!r}") if width else None,
    }
    if with_notes:
        link["speed_downgraded"] = _note_flag(speed.group("note")) if speed else None
        link["width_downgraded"] = _note_flag(width.group("note")) if width else None
    return link


def _acs(value: str) -> dict[str, bool]:
    flags = {}
    for flag in ACS_FLAGS:
        match = re.search(rf"\b{flag}([+-])", value)
        if match:
            flags[flag] = match.group(1) == "+"
    return flags


def _gt_per_s(pattern: str, value: str) -> float | None:
    match = re.search(pattern, value)
    return float(match.group(1)) if match else None


def _unknown_header() -> dict:
    return dict.fromkeys(("bdf", "description", "class", "class_id", "vendor_id", "device_id"))


def _header(bdf: str, description: str) -> dict:
    device = _unknown_header() | {
        "bdf": bdf if bdf.count(":") == 2 else f"0000:{bdf}",
        "description": description,
    }
    match = _CLASS_RE.match(description)
    if match:
        device["class"] = match.group("name")
        device["class_id"] = match.group("id").lower() if match.group("id") else None
        ids = _IDS_RE.findall(match.group("rest"))
        if ids:
            device["vendor_id"], device["device_id"] = (part.lower() for part in ids[-1])
    return device


def _device(device: dict, body: list[str]) -> dict:
    device.update(
        {
            "lnkcap": None,
            "lnksta": None,
            "lnkcap2_max_speed_gt_per_s": None,
            "lnkctl2_target_speed_gt_per_s": None,
            "acs_cap": None,
            "acs_ctl": None,
            "numa_node": None,
            "iommu_group": None,
            "kernel_driver": None,
        }
    )
    for line in body:
        field = _FIELD_RE.match(line)
        if not field:
            continue
        key, value = field.group("key"), field.group("value")
        if key == "LnkCap" and device["lnkcap"] is None:
            device["lnkcap"] = _link(value, with_notes=False)
        elif key == "LnkSta" and device["lnksta"] is None:
            device["lnksta"] = _link(value, with_notes=True)
        elif key == "LnkCap2" and device["lnkcap2_max_speed_gt_per_s"] is None:
            device["lnkcap2_max_speed_gt_per_s"] = _gt_per_s(rf"Speeds: {_GT}-({_GT})GT/s", value)
            if device["lnkcap2_max_speed_gt_per_s"] is None:
                device["lnkcap2_max_speed_gt_per_s"] = _gt_per_s(rf"Speeds: ({_GT})GT/s", value)
        elif key == "LnkCtl2" and device["lnkctl2_target_speed_gt_per_s"] is None:
            device["lnkctl2_target_speed_gt_per_s"] = _gt_per_s(
                rf"Target Link Speed: ({_GT})GT/s", value
            )
        elif key == "ACSCap" and device["acs_cap"] is None:
            device["acs_cap"] = _acs(value)
        elif key == "ACSCtl" and device["acs_ctl"] is None:
            device["acs_ctl"] = _acs(value)
        elif key == "NUMA node":
            device["numa_node"] = int_or_none(value, "lspci: NUMA node")
        elif key == "IOMMU group":
            device["iommu_group"] = count_or_none(value, "lspci: IOMMU group")
        elif key == "Kernel driver in use":
            device["kernel_driver"] = value.strip()
    return device


def _link_fields(lines: list[str]) -> list[list[str]] | None:
    """The Lnk* lines grouped per device, None when any other line is there."""
    groups: list[list[str]] = []
    keys: set[str] = set()
    for line in lines:
        if not line.strip():
            continue
        field = _FIELD_RE.match(line)
        if field is None or not field.group("key").startswith("Lnk"):
            return None
        key = field.group("key")
        if key == "LnkCap" or key in keys or not groups:
            groups.append([])
            keys = set()
        groups[-1].append(line)
        keys.add(key)
    return groups


def parse_lspci(text: str) -> dict:
    lines = require_text(text, KIND, EXPECTED)
    devices = []
    current: tuple[dict, list[str]] | None = None
    for line in lines:
        match = _DEVICE_LINE_RE.match(line)
        if match:
            if current:
                devices.append(_device(*current))
            current = (_header(match.group("bdf").lower(), match.group("description")), [])
        elif current and line.startswith(("\t", " ")):
            current[1].append(line)
    if current:
        devices.append(_device(*current))
    if devices:
        return whole({"devices": devices})
    groups = _link_fields(lines)
    if not groups:
        raise ParseError(
            f"{KIND}: no device line like '0000:41:00.0 3D controller: NVIDIA ...' and not"
            f" only Lnk* lines like 'LnkSta: Speed 16GT/s, Width x16'; expected {EXPECTED}"
        )
    return partial(
        {"devices": [_device(_unknown_header(), body) for body in groups]}, FRAGMENT_NOTE
    )
