"""Issue bar for kernel_cmdline on the pci=noacpi profile: check/diff, fix, reboot, prove."""

from __future__ import annotations

from lab_support import recap, run_playbook

GRUB_FILES = "/etc/default/grub /etc/default/grub.d/*.cfg /boot/grub/grub.cfg"


def test_noacpi_removed_rebooted_and_verified(booted_lab):
    spec = booted_lab.node("a6000-noacpi")
    checksums = f"md5sum {GRUB_FILES} 2>/dev/null; true"
    before = booted_lab.run(spec, checksums).stdout
    boot_before = booted_lab.boot_id(spec)
    assert "pci=noacpi" in booted_lab.run(spec, "cat /proc/cmdline").stdout.split()

    preview = run_playbook("site.yml", spec.name, "--check", "--diff")
    assert preview.returncode == 0, preview.stdout + preview.stderr
    assert '-GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"' in preview.stdout
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet"' in preview.stdout
    assert '+GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"' in preview.stdout
    assert booted_lab.run(spec, checksums).stdout == before, "check mode wrote a file"

    applied = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert applied.returncode == 0, applied.stdout + applied.stderr
    assert recap(applied.stdout, spec.name)["failed"] == 0
    assert booted_lab.boot_id(spec) != boot_before, "the node did not reboot"
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert "pci=noacpi" not in running
    assert "iommu=pt" in running
    numa = booted_lab.run(spec, "cat /sys/bus/pci/devices/*/numa_node | sort -u").stdout.split()
    assert "-1" not in numa
    types = booted_lab.run(spec, "cat /sys/kernel/iommu_groups/*/type | sort -u").stdout.split()
    assert types == ["identity"]

    again = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert again.returncode == 0, again.stdout
    assert recap(again.stdout, spec.name)["changed"] == 0
