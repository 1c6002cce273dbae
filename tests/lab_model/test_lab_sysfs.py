"""The rendered sysfs tree resolves like the kernel's, and config spaces decode."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from labmodel_support import load_profile

from lingbot_lab.configspace import (
    ACS_ECAP_OFFSET,
    PCIE_CAP_OFFSET,
    PcieLink,
    PciFunction,
    build_config_space,
    lspci_hex_dump,
)
from lingbot_lab.hwstate import compute_state
from lingbot_lab.sysfs import cpu_mask, render_sysfs


def render(tmp_path: Path, name: str, cmdline: str) -> tuple[Path, dict]:
    profile = load_profile(name)
    state = compute_state(profile, cmdline)
    lab_dir = tmp_path / "run" / "lingbot-lab"
    render_sysfs(state, profile, lab_dir, link_prefix=str(lab_dir))
    return lab_dir / "sys", state


def read(path: Path) -> str:
    return path.read_text(encoding="ascii").rstrip("\n")


def upstream_bridges(device_dir: Path) -> list[str]:
    """Walk up from a resolved device directory to the host bridge, as the toolkit does."""
    names = []
    current = device_dir.parent
    while not current.name.startswith("pci"):
        names.append(current.name)
        current = current.parent
    return [*names, current.name]


def test_gpu_links_resolve_through_the_bridges(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-iommu-acs", "ro intel_iommu=on")
    link = sys_dir / "bus" / "pci" / "devices" / "0000:1a:00.0"
    assert link.is_symlink()
    assert os.readlink(link) == str(
        tmp_path / "run/lingbot-lab/sys/devices/pci0000:16/0000:16:01.0/0000:17:00.0/"
        "0000:18:01.0/0000:1a:00.0"
    )
    resolved = Path(os.path.realpath(link))
    assert upstream_bridges(resolved) == [
        "0000:18:01.0",
        "0000:17:00.0",
        "0000:16:01.0",
        "pci0000:16",
    ]
    assert read(resolved / "vendor") == "0x10de"
    assert read(resolved / "device") == "0x2230"
    assert read(resolved / "class") == "0x030000"
    assert read(resolved / "numa_node") == "0"
    assert read(resolved / "local_cpulist") == "0-55"
    assert read(resolved / "local_cpus") == "00ffffff,ffffffff"
    assert read(resolved / "current_link_speed") == "16.0 GT/s PCIe"
    assert read(resolved / "max_link_width") == "16"
    assert (resolved / "config").stat().st_size == 4096
    for bridge in ("0000:18:01.0", "0000:17:00.0", "0000:16:01.0"):
        assert read(sys_dir / "bus/pci/devices" / bridge / "class") == "0x060400"


def test_iommu_groups_and_group_links(tmp_path):
    sys_dir, state = render(tmp_path, "a6000-iommu-acs", "ro intel_iommu=on")
    gpu_dir = Path(os.path.realpath(sys_dir / "bus/pci/devices/0000:19:00.0"))
    assert os.readlink(gpu_dir / "iommu_group") == "/sys/kernel/iommu_groups/4"
    group = sys_dir / "kernel/iommu_groups/4"
    assert read(group / "type") == "DMA-FQ"
    assert sorted(os.listdir(group / "devices")) == ["0000:19:00.0"]
    assert os.path.realpath(group / "devices/0000:19:00.0") == str(gpu_dir)
    assert sorted(os.listdir(sys_dir / "kernel/iommu_groups"), key=int) == [
        str(n) for n in range(6)
    ]
    assert state["gpus"][0]["iommu_group"] == 4
    sys_dir, _ = render(tmp_path, "pcie-4gpu-two-switches", "ro")
    assert sorted(os.listdir(sys_dir / "kernel/iommu_groups/4/devices")) == [
        "0000:23:00.0",
        "0000:24:00.0",
    ]
    assert read(sys_dir / "kernel/iommu_groups/4/type") == "identity"


def test_iommu_off_renders_no_groups(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-noacpi", "ro pci=noacpi")
    assert os.listdir(sys_dir / "kernel/iommu_groups") == []
    gpu_dir = Path(os.path.realpath(sys_dir / "bus/pci/devices/0000:18:00.0"))
    assert not (gpu_dir / "iommu_group").exists()
    assert read(gpu_dir / "numa_node") == "-1"
    assert read(gpu_dir / "local_cpulist") == "0-127"
    assert read(gpu_dir / "local_cpus") == "ffffffff,ffffffff,ffffffff,ffffffff"
    port_dir = Path(os.path.realpath(sys_dir / "bus/pci/devices/0000:31:02.0"))
    assert read(port_dir / "numa_node") == "-1"


def test_idle_links_and_negotiated_widths(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-idle-gen1", "ro")
    gpu = sys_dir / "bus/pci/devices/0000:21:00.0"
    port = sys_dir / "bus/pci/devices/0000:20:01.1"
    assert read(gpu / "current_link_speed") == "2.5 GT/s PCIe"
    assert read(gpu / "max_link_speed") == "16.0 GT/s PCIe"
    assert read(port / "current_link_speed") == "2.5 GT/s PCIe"
    sys_dir, _ = render(tmp_path, "a6000-x8", "ro")
    gpu = sys_dir / "bus/pci/devices/0000:02:00.0"
    assert (read(gpu / "current_link_width"), read(gpu / "max_link_width")) == ("8", "16")
    assert read(sys_dir / "bus/pci/devices/0000:00:01.2/max_link_width") == "8"
    sys_dir, _ = render(tmp_path, "h100-sxm-nvswitch", "ro")
    gpu = sys_dir / "bus/pci/devices/0000:dc:00.0"
    assert read(gpu / "current_link_speed") == "32.0 GT/s PCIe"
    assert read(gpu / "class") == "0x030200"
    assert read(gpu / "numa_node") == "1"
    assert read(gpu / "local_cpulist") == "56-111,168-223"


def decode_link(space: bytes) -> dict[str, int]:
    base = space[0x34]
    while space[base] != 0x10:
        base = space[base + 1]
    lnkcap = struct.unpack_from("<I", space, base + 0x0C)[0]
    lnksta = struct.unpack_from("<H", space, base + 0x12)[0]
    lnkcap2 = struct.unpack_from("<I", space, base + 0x2C)[0]
    return {
        "type": (space[base + 2] >> 4) & 0xF,
        "max_speed": lnkcap & 0xF,
        "max_width": (lnkcap >> 4) & 0x3F,
        "speed": lnksta & 0xF,
        "width": (lnksta >> 4) & 0x3F,
        "speed_vector": (lnkcap2 >> 1) & 0x7F,
        "target_speed": struct.unpack_from("<H", space, base + 0x30)[0] & 0xF,
    }


def test_config_space_bytes_decode(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-gen3", "ro")
    gpu = (sys_dir / "bus/pci/devices/0000:41:00.0/config").read_bytes()
    assert struct.unpack_from("<HH", gpu, 0) == (0x10DE, 0x2230)
    assert gpu[0x0E] == 0x00 and gpu[0x0B] == 0x03 and gpu[0x0A] == 0x00
    assert struct.unpack_from("<HH", gpu, 0x2C) == (0x10DE, 0x1459)
    assert decode_link(gpu) == {
        "type": 0,
        "max_speed": 4,
        "max_width": 16,
        "speed": 3,
        "width": 16,
        "speed_vector": 0b1111,
        "target_speed": 0,
    }
    port = (sys_dir / "bus/pci/devices/0000:40:01.1/config").read_bytes()
    assert port[0x0E] == 0x01
    assert (port[0x18], port[0x19], port[0x1A]) == (0x40, 0x41, 0x41)
    assert decode_link(port) == {
        "type": 4,
        "max_speed": 4,
        "max_width": 16,
        "speed": 3,
        "width": 16,
        "speed_vector": 0b1111,
        "target_speed": 3,
    }
    header = struct.unpack_from("<I", port, ACS_ECAP_OFFSET)[0]
    assert (header & 0xFFFF, (header >> 16) & 0xF, header >> 20) == (0x000D, 1, 0)
    assert struct.unpack_from("<H", port, ACS_ECAP_OFFSET + 6)[0] == 0x0001


def test_acs_control_register_and_bus_numbers_on_a_switch(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-iommu-acs", "ro")
    downstream = (sys_dir / "bus/pci/devices/0000:18:01.0/config").read_bytes()
    assert struct.unpack_from("<H", downstream, ACS_ECAP_OFFSET + 6)[0] == 0b11101
    assert decode_link(downstream)["type"] == 6
    upstream = (sys_dir / "bus/pci/devices/0000:17:00.0/config").read_bytes()
    assert struct.unpack_from("<H", upstream, ACS_ECAP_OFFSET + 6)[0] == 0
    assert decode_link(upstream)["type"] == 5
    assert (upstream[0x18], upstream[0x19], upstream[0x1A]) == (0x17, 0x18, 0x1A)
    root = (sys_dir / "bus/pci/devices/0000:16:01.0/config").read_bytes()
    assert (root[0x19], root[0x1A]) == (0x17, 0x1A)


def test_gpu_config_has_no_acs_and_pcie_capability_in_place():
    link = PcieLink(max_gen=5, max_width=16, gen=1, width=16, target_gen=0)
    space = build_config_space(
        PciFunction(0x10DE, 0x2330, 0x030200, 0xA1, link, pcie_type=0, subsystem_device_id=0x16C1)
    )
    assert len(space) == 4096
    assert space[0x34] == 0x60 and space[0x60] == 0x01 and space[0x61] == PCIE_CAP_OFFSET
    assert space[PCIE_CAP_OFFSET] == 0x10
    assert space[ACS_ECAP_OFFSET : ACS_ECAP_OFFSET + 4] == b"\0\0\0\0"
    assert struct.unpack_from("<I", space, PCIE_CAP_OFFSET + 0x0C)[0] & 0x3FF == 0x105


def test_cpu_mask_words():
    assert cpu_mask("0-15", 32) == "0000ffff"
    assert cpu_mask("32-63,96-127", 128) == "ffffffff,00000000,ffffffff,00000000"


@pytest.mark.skipif(shutil.which("lspci") is None, reason="pciutils (lspci) not installed")
def test_lspci_decodes_the_dump(tmp_path):
    sys_dir, _ = render(tmp_path, "a6000-iommu-acs", "ro")
    dumps = []
    for bdf in ("0000:18:01.0", "0000:19:00.0"):
        space = (sys_dir / "bus/pci/devices" / bdf / "config").read_bytes()
        dumps.append(lspci_hex_dump(bdf, "device", space))
    dump_file = tmp_path / "lspci.txt"
    dump_file.write_text("".join(dumps), encoding="ascii")
    output = subprocess.run(
        ["lspci", "-F", str(dump_file), "-vv"], capture_output=True, text=True, check=True
    ).stdout
    assert "LnkCap:\tPort #1, Speed 16GT/s, Width x16" in output
    assert "LnkSta:\tSpeed 16GT/s" in output
    assert "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+" in output
