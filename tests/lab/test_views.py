"""Every view a lab node shows agrees with its profile: sysfs, nvidia-smi, state."""

from __future__ import annotations

import pytest

from lingbot_fleet.lab.manager import available_profiles, load_profile
from lingbot_fleet.parsers import parse

COLLECT_VIEWS = r"""
import json, os, subprocess
def read(path):
    try:
        return open(path).read().strip()
    except OSError:
        return None
views = {"cmdline": read("/proc/cmdline"), "sysfs": {}}
for bdf in sorted(os.listdir("/sys/bus/pci/devices")):
    d = "/sys/bus/pci/devices/" + bdf
    entry = {k: read(d + "/" + k) for k in ("vendor", "device", "class", "numa_node",
             "current_link_width", "max_link_width", "max_link_speed", "local_cpulist")}
    entry["realpath"] = os.path.realpath(d)
    views["sysfs"][bdf] = entry
def run(*argv):
    return subprocess.run(argv, capture_output=True, text=True).stdout
views["smi"] = run("nvidia-smi", "--query-gpu=index,uuid,pci.bus_id,name,"
                   "pcie.link.width.current,pcie.link.gen.max,memory.total",
                   "--format=csv,noheader,nounits")
views["topo"] = run("nvidia-smi", "topo", "-m")
views["state"] = json.load(open("/run/lingbot-lab/state.json"))
print(json.dumps(views))
"""


def _expected_numa(profile: dict, gpu: dict, cmdline: str) -> int:
    if "pci=noacpi" in cmdline.split() or any(
        token.startswith("pci=") and "noacpi" in token.split("=", 1)[1].split(",")
        for token in cmdline.split()
    ):
        return -1
    ports = {port["bdf"]: port for port in profile["pcie_ports"]}
    parent = gpu["parent"]
    while parent in ports:
        parent = ports[parent]["parent"]
    bridge = next(b for b in profile["host_bridges"] if b["id"] == parent)
    return bridge["numa_node"]


@pytest.mark.parametrize("profile_name", available_profiles())
def test_views_agree_with_profile(booted_lab, profile_name):
    spec = booted_lab.node(profile_name)
    profile = load_profile(profile_name)
    views = booted_lab.python(spec, COLLECT_VIEWS)

    smi_rows = [line.split(", ") for line in views["smi"].strip().splitlines()]
    assert len(smi_rows) == len(profile["gpus"])
    for index, gpu in enumerate(profile["gpus"]):
        sysfs = views["sysfs"][gpu["bdf"]]
        assert sysfs["vendor"] == "0x10de"
        assert int(sysfs["device"], 16) == gpu["pci_device_id"]
        assert int(sysfs["numa_node"]) == _expected_numa(profile, gpu, views["cmdline"])
        assert int(sysfs["current_link_width"]) == gpu["link"]["width"]
        assert f"/{gpu['parent']}/{gpu['bdf']}" in sysfs["realpath"]

        row = smi_rows[index]
        assert row[0] == str(index)
        assert row[1] == gpu["uuid"]
        assert row[2] == "0000" + gpu["bdf"].upper()
        assert row[3] == gpu["model"]
        assert int(row[4]) == gpu["link"]["width"]
        assert int(row[5]) == gpu["link"]["max_gen"]
        assert int(row[6]) == gpu["memory_mib"]

    topo = parse("topo", views["topo"])
    for pair in views["state"]["pairs"]:
        label = topo["links"][f"GPU{pair['a']}"][f"GPU{pair['b']}"]
        assert label == pair["topology"], (pair, label)
