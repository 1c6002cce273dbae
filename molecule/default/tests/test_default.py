"""Verify the converged lab nodes (testinfra, through molecule's inventory)."""

from __future__ import annotations


def test_sshd_and_systemd_running(host):
    assert host.service("ssh").is_running
    state = host.run("systemctl is-system-running")
    assert state.stdout.strip() in {"running", "degraded"}, state.stdout


def test_lab_firmware_rendered_gpus(host):
    nvidia = [
        entry
        for entry in host.file("/sys/bus/pci/devices").listdir()
        if host.file(f"/sys/bus/pci/devices/{entry}/vendor").content_string.strip() == "0x10de"
    ]
    assert len(nvidia) >= 2


def test_persistence_mode_on_for_every_gpu(host):
    modes = host.check_output(
        "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader"
    ).split()
    assert modes and set(modes) == {"Enabled"}
    assert host.service("nvidia-persistenced").is_enabled
    assert host.service("nvidia-persistenced").is_running


def test_persistenced_unit_fixed_by_dropin_only_where_needed(host):
    unit = host.check_output("systemctl cat nvidia-persistenced.service")
    dropin = host.file("/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf")
    if (
        "--no-persistence-mode"
        in host.file("/lib/systemd/system/nvidia-persistenced.service").content_string
    ):
        assert dropin.exists
        assert unit.count("ExecStart=") >= 2
    else:
        assert not dropin.exists
