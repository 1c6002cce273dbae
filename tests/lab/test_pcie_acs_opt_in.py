"""ACS redirect off by opt-in on the IOMMU+ACS node: the probe after a reboot measures the
switch's own P2P figure, and a rollback sets the bits back and takes the unit away.

The node is the lab's a6000-iommu-acs (two A6000 behind a PEX88096 switch whose
downstream ports redirect peer requests to the root complex, and intel_iommu=on without
iommu=pt). Other tests use it too: this one starts and ends with the node as before the
toolkit touched it (rollback to generation 0, with its reboot), but for the toolkit's own
state outside the generations (the saved probe, receipts), so it runs after test_audit,
which audits the node as it was booted.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from lab_support import recap, run_playbook

from lingbot_fleet.lab import layout

PROFILE = "a6000-iommu-acs"
SWITCH_PORTS = ["0000:18:00.0", "0000:18:01.0"]
UNIT = "/etc/systemd/system/lingbot-fleet-acs-redirect-off.service"
LATEST_PROBE = "/var/lib/lingbot-fleet/probe/latest.json"
TOOLKIT_FILES = (
    "find -L /etc/default/grub /etc/default/grub.d /etc/lingbot /etc/systemd/system "
    "/etc/modules-load.d /etc/lingbot-fleet -type f 2>/dev/null | sort | xargs -r md5sum"
)
REBOOT = {"kernel_cmdline_reboot": "if_required"}


def switch_figure_gbytes_per_s() -> float:
    """The profile's P2P figure of the pair when no switch port redirects."""
    profile = yaml.safe_load((layout.REPO_ROOT / "lab" / "profiles" / f"{PROFILE}.yml").read_text())
    [path] = profile["paths"]
    return float(path["p2p_without_acs_redirect"]["gbytes_per_s"]), float(
        path["p2p"]["gbytes_per_s"]
    )


def acs_words(booted_lab, spec) -> list[str]:
    return [
        booted_lab.run(spec, f"setpci -s {bdf} ECAP_ACS+6.w").stdout.strip() for bdf in SWITCH_PORTS
    ]


def measured_p2p_gbytes_per_s(booted_lab, spec) -> list[float]:
    probe = json.loads(booted_lab.run(spec, f"cat {LATEST_PROBE}").stdout)
    assert all(pair["data_check"] == "passed" for pair in probe["pairs"]), probe["pairs"]
    return [pair["p2p_enabled"]["unidirectional_gbytes_per_s"] for pair in probe["pairs"]]


def to_generation_zero(spec) -> None:
    done = run_playbook(
        "playbooks/rollback.yml",
        spec.name,
        "-e",
        json.dumps({"rollback_confirm": True, "rollback_to": 0, **REBOOT}),
    )
    assert done.rc == 0, done.stdout[-4000:]


def test_acs_redirect_off_holds_across_a_reboot_and_a_rollback_undoes_it(booted_lab):
    spec = booted_lab.node(PROFILE)
    if booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations", check=False).stdout.split():
        to_generation_zero(spec)
    original = booted_lab.run(spec, TOOLKIT_FILES).stdout
    switch_gbytes_per_s, redirected_gbytes_per_s = switch_figure_gbytes_per_s()
    assert acs_words(booted_lab, spec) == ["001d", "001d"]
    opt_in = json.dumps({"pcie_acs_redirect_off_bridges": SWITCH_PORTS, **REBOOT})

    # The first run reboots into iommu=pt (ACS is refused while the IOMMU translates),
    # then turns redirect off before the probe measures.
    first = run_playbook("site.yml", spec.name, "-e", opt_in)
    assert first.rc == 0, first.stdout[-4000:]
    assert acs_words(booted_lab, spec) == ["0011", "0011"]
    measured = measured_p2p_gbytes_per_s(booted_lab, spec)
    assert min(measured) >= 0.9 * switch_gbytes_per_s > redirected_gbytes_per_s, measured
    second = run_playbook("site.yml", spec.name, "-e", opt_in)
    assert second.rc == 0 and recap(second, spec.name)["changed"] == 0, second.stdout[-4000:]

    # The bits come back at every boot; the unit turns them off again before anything
    # uses the GPUs, and a new probe (forced) measures the switch's figure again.
    booted_lab.reboot(spec)
    assert acs_words(booted_lab, spec) == ["0011", "0011"]
    assert booted_lab.run(spec, f"systemctl is-active {Path(UNIT).name}").stdout.strip() == (
        "active"
    )
    forced = run_playbook("site.yml", spec.name, "-e", opt_in, "-e", "p2p_probe_max_age_s=0")
    assert forced.rc == 0, forced.stdout[-4000:]
    measured = measured_p2p_gbytes_per_s(booted_lab, spec)
    assert min(measured) >= 0.9 * switch_gbytes_per_s, measured

    # One rollback: the unit is stopped (the bits go back at once) and removed, and the
    # node is as before, byte for byte.
    to_generation_zero(spec)
    assert acs_words(booted_lab, spec) == ["001d", "001d"]
    assert booted_lab.run(spec, f"test -e {UNIT}", check=False).returncode == 1
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original
