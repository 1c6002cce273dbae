"""Decode the parts of a PCI configuration space the facts need (stdlib only).

The bytes are what sysfs `config` returns: 4096 bytes for root, often only the first 64
for other users (then the capability lists cannot be walked and the result says so).
"""

from __future__ import annotations

import struct

CAP_POINTER_OFFSET = 0x34
STATUS_OFFSET = 0x06
STATUS_CAPABILITIES_LIST = 0x0010
CAP_ID_PCIE = 0x10
EXTENDED_CAPS_OFFSET = 0x100
ECAP_ID_ACS = 0x000D
ACS_CONTROL_OFFSET = 6
MAX_CAPABILITIES = 64
# PCI Express capability, device/port type (flags register bits 7:4).
PCIE_PORT_TYPES = {
    0x0: "endpoint",
    0x1: "legacy_endpoint",
    0x4: "root_port",
    0x5: "switch_upstream",
    0x6: "switch_downstream",
    0x7: "pcie_to_pci_bridge",
    0x8: "pci_to_pcie_bridge",
    0x9: "root_complex_integrated_endpoint",
    0xA: "root_complex_event_collector",
}
# ACS control register bits (PCIe base specification, ACS Extended Capability).
ACS_CONTROL_BITS = {
    "source_validation": 0,
    "translation_blocking": 1,
    "request_redirect": 2,
    "completion_redirect": 3,
    "upstream_forwarding": 4,
    "p2p_egress_control": 5,
    "direct_translated": 6,
}


def _u16(space: bytes, offset: int) -> int:
    return int(struct.unpack_from("<H", space, offset)[0])


def _u32(space: bytes, offset: int) -> int:
    return int(struct.unpack_from("<I", space, offset)[0])


def find_capability(space: bytes, capability_id: int) -> int | None:
    """Offset of a standard capability, None when absent or the space is too short."""
    if len(space) < 0x40 or not _u16(space, STATUS_OFFSET) & STATUS_CAPABILITIES_LIST:
        return None
    offset = space[CAP_POINTER_OFFSET] & 0xFC
    for _ in range(MAX_CAPABILITIES):
        if offset < 0x40 or offset + 2 > len(space):
            return None
        if space[offset] == capability_id:
            return offset
        offset = space[offset + 1] & 0xFC
    return None


def find_extended_capability(space: bytes, capability_id: int) -> int | None:
    """Offset of an extended capability (list from 0x100), None when absent."""
    offset = EXTENDED_CAPS_OFFSET
    for _ in range(MAX_CAPABILITIES):
        if offset < EXTENDED_CAPS_OFFSET or offset + 4 > len(space):
            return None
        header = _u32(space, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == capability_id:
            return offset
        offset = (header >> 20) & 0xFFC
    return None


def pcie_port_type(space: bytes) -> str | None:
    """root_port, switch_upstream, ... from the PCI Express capability; None if unreadable."""
    offset = find_capability(space, CAP_ID_PCIE)
    if offset is None or offset + 4 > len(space):
        return None
    kind = (_u16(space, offset + 2) >> 4) & 0xF
    return PCIE_PORT_TYPES.get(kind, f"type_{kind:#x}")


def extended_space_readable(space: bytes) -> bool:
    return len(space) > EXTENDED_CAPS_OFFSET


def acs_control(space: bytes) -> dict[str, object] | None:
    """The ACS control register as {control: '0x001d', <flag>: bool...}; None without ACS."""
    offset = find_extended_capability(space, ECAP_ID_ACS)
    if offset is None or offset + ACS_CONTROL_OFFSET + 2 > len(space):
        return None
    control = _u16(space, offset + ACS_CONTROL_OFFSET)
    flags: dict[str, object] = {"control": f"0x{control:04x}"}
    for name, bit in ACS_CONTROL_BITS.items():
        flags[name] = bool(control & (1 << bit))
    return flags
