"""Issue bar for the audit on the mixed lab: the findings the profiles imply, each node's
plan, and nothing changed on any node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lab_support import audited_node, run_audit

from lingbot_fleet.lab import layout

TOOLKIT_FILES = (
    "find /etc/default/grub /etc/default/grub.d /boot/grub /boot/loader /etc/lingbot "
    "/etc/systemd/system /var/lib/lingbot-fleet -type f 2>/dev/null | sort | xargs -r md5sum"
)
# Every node starts unconverged: iommu=pt not yet in effect, persistence off (the daemon
# is not enabled), no probe saved, LingBot not deployed, and no pynvml for NVML (the
# toolkit's venv is not installed yet), so the GPUs' health is read as unknown.
UNCONVERGED = {
    "KERNEL_PARAMS_NOT_IN_EFFECT",
    "PERSISTENCE_MODE_OFF",
    "PROBE_MISSING",
    "LINGBOT_NOT_DEPLOYED",
    "GPU_HEALTH_UNREAD",
}
IMPLIED_BY_PROFILE = {
    "a6000-already-configured": set(),
    "a6000-chipset": {"PCIE_GPU_BEHIND_CHIPSET", "PCIE_WIDTH_BELOW_EXPECTED"},
    "a6000-dual-socket": set(),
    "a6000-gen3": {"PCIE_GEN_BELOW_EXPECTED"},
    "a6000-idle-gen1": set(),
    "a6000-iommu-acs": {"PCIE_ACS_REDIRECT"},
    "a6000-noacpi": {"NUMA_NODE_MISSING"},
    "a6000-persistenced-off": set(),
    "a6000-phb": set(),
    "a6000-ubuntu-vt-handoff": {"NUMA_NODE_MISSING"},
    "a6000-x8": {"PCIE_WIDTH_BELOW_EXPECTED"},
    "h100-sxm-nvswitch": set(),
    "pcie-4gpu-two-switches": set(),
    "pcie-switch-narrow-uplink": {"PCIE_LINK_TRAINED_BELOW_CAPABILITY"},
    "rhel8-bls-kernelopts": {"NUMA_NODE_MISSING"},
    "rhel9-bls-kernel-cmdline": set(),
}
# A node configured by hand before the toolkit came has the kernel parameters in effect.
SATISFIED_BY_PROFILE = {"a6000-already-configured": {"KERNEL_PARAMS_NOT_IN_EFFECT"}}


def test_audit_reports_the_implied_findings_and_changes_nothing(booted_lab, tmp_path):
    before = {spec.name: booted_lab.run(spec, TOOLKIT_FILES).stdout for spec in booted_lab.specs}
    audit = subprocess.run(
        [
            str(Path(sys.executable).parent / "lingbot-fleet"),
            "audit",
            "-i",
            str(layout.LAB_INVENTORY),
            "--report-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert audit.returncode == 1, audit.stdout + audit.stderr
    fleet = json.loads((tmp_path / "fleet.json").read_text())
    nodes = {node["host"]: node for node in fleet["nodes"]}
    assert set(nodes) == {spec.name for spec in booted_lab.specs}
    for spec in booted_lab.specs:
        node = nodes[spec.name]
        codes = {finding["code"] for finding in node["findings"]}
        expected = UNCONVERGED | IMPLIED_BY_PROFILE[spec.profile]
        assert codes == expected - SATISFIED_BY_PROFILE.get(spec.profile, set()), spec.profile
        assert node["plan"]["summary"], spec.profile
    h100, noacpi = booted_lab.node("h100-sxm-nvswitch"), booted_lab.node("a6000-noacpi")
    assert nodes[h100.name]["plan"]["instances"][1]["name"] == "numa1"
    assert nodes[noacpi.name]["plan"]["instances"] == []
    for name in ("fleet.md", "fleet.html", "junit.xml"):
        assert (tmp_path / name).stat().st_size > 0

    after = {spec.name: booted_lab.run(spec, TOOLKIT_FILES).stdout for spec in booted_lab.specs}
    assert after == before, "the audit changed files on a node"


# The lab driver's state on a node; moved away, the simulated driver is not loaded (its
# libnvidia-ml says Driver Not Loaded, its nvidia-smi exits 9), as after a reboot into a
# kernel the NVIDIA module was not built for. sysfs still lists the GPUs.
DRIVER_STATE = ("/run/lingbot-lab/state.json", "/run/lingbot-lab/state.txt")
UNLOADED = "/run/lingbot-lab/unloaded"


def test_a_node_whose_driver_is_not_loaded_is_critical_and_untouched(booted_lab, tmp_path):
    spec = booted_lab.node("a6000-gen3")
    before = booted_lab.run(spec, TOOLKIT_FILES).stdout
    state_sums = booted_lab.run(spec, f"md5sum {' '.join(DRIVER_STATE)}").stdout
    booted_lab.run(spec, f"mkdir -p {UNLOADED} && mv {' '.join(DRIVER_STATE)} {UNLOADED}/")
    try:
        audit = run_audit(spec, tmp_path)
    finally:
        booted_lab.run(spec, f"mv {UNLOADED}/* /run/lingbot-lab/ && rmdir {UNLOADED}")
    assert booted_lab.run(spec, f"md5sum {' '.join(DRIVER_STATE)}").stdout == state_sums
    assert audit.returncode == 1, audit.stdout + audit.stderr
    findings = audited_node(tmp_path)["findings"]
    [driver] = [f for f in findings if f["code"] == "GPU_DRIVER_NOT_LOADED"]
    assert (driver["severity"], driver["subject"]) == ("critical", "node")
    assert driver["message"].startswith("the NVIDIA driver is not loaded: 2 NVIDIA GPU(s)")
    assert any("exited 9" in line for line in driver["evidence"]["driver"]), driver["evidence"]
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == before, "the audit changed files"
