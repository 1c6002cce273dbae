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
