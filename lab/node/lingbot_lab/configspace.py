"""4096-byte PCI configuration space of a GPU (type 0) or a bridge (type 1)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

CONFIG_SPACE_BYTES = 4096
POWER_MANAGEMENT_OFFSET = 0x60
PCIE_CAP_OFFSET = 0x78
ACS_ECAP_OFFSET = 0x100
CAP_ID_POWER_MANAGEMENT = 0x01
CAP_ID_PCIE = 0x10
ECAP_ID_ACS = 0x000D
# PCI Express capability: device/port type (bits 7:4 of the capabilities register).
PCIE_TYPE_ENDPOINT = 0x0
PCIE_TYPE_ROOT_PORT = 0x4
PCIE_TYPE_UPSTREAM = 0x5
PCIE_TYPE_DOWNSTREAM = 0x6
PORT_KIND_PCIE_TYPE = {
    "root_port": PCIE_TYPE_ROOT_PORT,
    "chipset_port": PCIE_TYPE_ROOT_PORT,
    "switch_upstream": PCIE_TYPE_UPSTREAM,
    "switch_downstream": PCIE_TYPE_DOWNSTREAM,
}
# Offsets inside the PCI Express capability.
PCIE_LNKCAP = 0x0C
PCIE_LNKCTL = 0x10
PCIE_LNKSTA = 0x12
PCIE_LNKCAP2 = 0x2C
PCIE_LNKCTL2 = 0x30
# ACS control register bits (offset +6 of the ACS capability).
ACS_CONTROL_BITS = {
    "source_validation": 0,
    "request_redirect": 2,
    "completion_redirect": 3,
    "upstream_forwarding": 4,
    "p2p_egress_control": 5,
    "direct_translated": 6,
}
ACS_CAPABILITY_WITHOUT_EGRESS = 0x005F
ACS_EGRESS_CONTROL_CAPABLE = 0x0020
ACS_EGRESS_VECTOR_BITS = 8


@dataclass(frozen=True)
class PcieLink:
    """A link as the capability encodes it: max_* in LnkCap, current in LnkSta."""

    max_gen: int
    max_width: int
    gen: int
    width: int
    target_gen: int


@dataclass(frozen=True)
class PciFunction:
    vendor_id: int
    device_id: int
    class_code: int  # 24 bits: base class, subclass, programming interface
    revision: int
    link: PcieLink
    pcie_type: int
    subsystem_vendor_id: int = 0
    subsystem_device_id: int = 0
    # Type 1 (bridges) only.
    primary_bus: int = 0
    secondary_bus: int = 0
    subordinate_bus: int = 0
    acs_control: int | None = None
    port_number: int = 0


def acs_control_word(acs: dict[str, bool]) -> int:
    word = 0
    for flag, bit in ACS_CONTROL_BITS.items():
        if acs.get(flag):
            word |= 1 << bit
    return word


def lnkcap2_speed_vector(max_gen: int) -> int:
    """Supported Link Speeds Vector (bits 7:1): every generation up to max_gen."""
    return ((1 << max_gen) - 1) << 1


def _put(space: bytearray, offset: int, fmt: str, value: int) -> None:
    struct.pack_into("<" + fmt, space, offset, value)


def _header(space: bytearray, function: PciFunction, is_bridge: bool) -> None:
    _put(space, 0x00, "H", function.vendor_id)
    _put(space, 0x02, "H", function.device_id)
    _put(space, 0x04, "H", 0x0407)  # I/O + memory space, bus master, INTx disabled
    _put(space, 0x06, "H", 0x0010)  # capabilities list present
    space[0x08] = function.revision
    _put(space, 0x09, "I", function.class_code)  # 3 bytes written, byte 0x0c rewritten below
    space[0x0C] = 0x10 if is_bridge else 0x00  # cache line size (dwords)
    space[0x0D] = 0x00
    space[0x0E] = 0x01 if is_bridge else 0x00
    space[0x0F] = 0x00
    space[0x34] = POWER_MANAGEMENT_OFFSET
    space[0x3C] = 0xFF
    space[0x3D] = 0x01  # INTA#
    if is_bridge:
        space[0x18] = function.primary_bus
        space[0x19] = function.secondary_bus
        space[0x1A] = function.subordinate_bus
        _put(space, 0x1C, "H", 0x00F0)  # I/O window closed (base > limit)
        _put(space, 0x20, "I", 0x0000FFF0)  # memory window closed
        _put(space, 0x24, "I", 0x0001FFF1)  # 64-bit prefetchable window closed
        _put(space, 0x3E, "H", 0x0012)  # SERR# enable, VGA off
    else:
        _put(space, 0x10, "I", 0xFB000000)  # BAR0: 32-bit memory
        _put(space, 0x14, "I", 0x0000000C)  # BAR1: 64-bit prefetchable memory
        _put(space, 0x1C, "I", 0x0000000C)  # BAR3: 64-bit prefetchable memory
        _put(space, 0x2C, "H", function.subsystem_vendor_id)
        _put(space, 0x2E, "H", function.subsystem_device_id)


def _power_management(space: bytearray) -> None:
    space[POWER_MANAGEMENT_OFFSET] = CAP_ID_POWER_MANAGEMENT
    space[POWER_MANAGEMENT_OFFSET + 1] = PCIE_CAP_OFFSET
    _put(space, POWER_MANAGEMENT_OFFSET + 2, "H", 0x0003)  # PM spec 1.2
    _put(space, POWER_MANAGEMENT_OFFSET + 4, "H", 0x0008)  # D0, no soft reset


def _pcie_capability(space: bytearray, function: PciFunction) -> None:
    base = PCIE_CAP_OFFSET
    link = function.link
    is_port = function.pcie_type != PCIE_TYPE_ENDPOINT
    slot = function.pcie_type in (PCIE_TYPE_ROOT_PORT, PCIE_TYPE_DOWNSTREAM)
    space[base] = CAP_ID_PCIE
    space[base + 1] = 0x00
    _put(space, base + 0x02, "H", 0x0002 | (function.pcie_type << 4) | (0x0100 if slot else 0))
    _put(space, base + 0x04, "I", 0x00008001 if not is_port else 0x00008021)  # MPS 256
    _put(space, base + 0x08, "H", 0x2930 if not is_port else 0x0027)  # DevCtl
    lnkcap = link.max_gen | (link.max_width << 4) | (0x3 << 10)  # ASPM L0s and L1
    if is_port:
        lnkcap |= 1 << 20  # Data Link Layer Link Active Reporting
        lnkcap |= function.port_number << 24
    _put(space, base + PCIE_LNKCAP, "I", lnkcap)
    _put(space, base + PCIE_LNKCTL, "H", 0x0040)  # common clock
    lnksta = link.gen | (link.width << 4) | (1 << 12)  # slot clock configuration
    if is_port:
        lnksta |= 1 << 13  # Data Link Layer Link Active
    _put(space, base + PCIE_LNKSTA, "H", lnksta)
    _put(space, base + 0x24, "I", 0x00000010 if not is_port else 0x00000000)  # DevCap2
    _put(space, base + PCIE_LNKCAP2, "I", lnkcap2_speed_vector(link.max_gen))
    _put(space, base + PCIE_LNKCTL2, "H", link.target_gen)


def _acs_capability(space: bytearray, control: int) -> None:
    header = ECAP_ID_ACS | (1 << 16)  # version 1, next 0: last extended capability
    _put(space, ACS_ECAP_OFFSET, "I", header)
    capability = ACS_CAPABILITY_WITHOUT_EGRESS
    if control & (1 << ACS_CONTROL_BITS["p2p_egress_control"]):
        capability |= ACS_EGRESS_CONTROL_CAPABLE | (ACS_EGRESS_VECTOR_BITS << 8)
    _put(space, ACS_ECAP_OFFSET + 4, "H", capability)
    _put(space, ACS_ECAP_OFFSET + 6, "H", control)


def build_config_space(function: PciFunction) -> bytes:
    """The function's 4096-byte configuration space, little-endian as sysfs `config`."""
    space = bytearray(CONFIG_SPACE_BYTES)
    is_bridge = function.pcie_type != PCIE_TYPE_ENDPOINT
    _header(space, function, is_bridge)
    _power_management(space)
    _pcie_capability(space, function)
    if function.acs_control is not None:
        _acs_capability(space, function.acs_control)
    return bytes(space)


def lspci_hex_dump(bdf: str, description: str, space: bytes) -> str:
    """The bytes in `lspci -xxxx` text form, which `lspci -F <file>` reads back."""
    bus_device_function = bdf.split(":", 1)[1] if bdf.count(":") == 2 else bdf
    lines = [f"{bus_device_function} {description}"]
    for offset in range(0, len(space), 16):
        row = " ".join(f"{byte:02x}" for byte in space[offset : offset + 16])
        lines.append(f"{offset:03x}: {row}")
    return "\n".join(lines) + "\n\n"
