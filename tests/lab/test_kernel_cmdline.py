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
    assert preview.rc == 0, preview.stdout
    assert '-GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"' in preview.stdout
    assert '+GRUB_CMDLINE_LINUX_DEFAULT="quiet"' in preview.stdout
    assert '+GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"' in preview.stdout
    assert booted_lab.run(spec, checksums).stdout == before, "check mode wrote a file"

    applied = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert applied.rc == 0, applied.stdout
    assert recap(applied, spec.name)["failed"] == 0
    assert booted_lab.boot_id(spec) != boot_before, "the node did not reboot"
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert "pci=noacpi" not in running
    assert "iommu=pt" in running
    numa = booted_lab.run(spec, "cat /sys/bus/pci/devices/*/numa_node | sort -u").stdout.split()
    assert "-1" not in numa
    types = booted_lab.run(spec, "cat /sys/kernel/iommu_groups/*/type | sort -u").stdout.split()
    assert types == ["identity"]

    again = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert again.rc == 0, again.stdout
    assert recap(again, spec.name)["changed"] == 0


def test_rollback_restores_grub_and_the_previous_cmdline(booted_lab):
    spec = booted_lab.node("a6000-noacpi")
    grub = "md5sum /etc/default/grub /etc/default/grub.d/*.cfg 2>/dev/null; true"
    listing = booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations").stdout.split()
    assert "1" in listing, "the previous test converged the node in generation 1"

    preview = run_playbook("playbooks/rollback.yml", spec.name, "--check")
    assert preview.rc == 0, preview.stdout[-3000:]
    assert "/etc/default/grub" in preview.stdout
    assert "pci=noacpi" not in booted_lab.run(spec, "cat /proc/cmdline").stdout

    rolled = run_playbook(
        "playbooks/rollback.yml",
        spec.name,
        "-e",
        "rollback_confirm=true",
        "-e",
        "kernel_cmdline_reboot=if_required",
    )
    assert rolled.rc == 0, rolled.stdout[-3000:]
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert "pci=noacpi" in running
    assert "iommu=pt" not in running
    assert "lingbot-fleet.cfg" not in booted_lab.run(spec, "ls /etc/default/grub.d").stdout
    assert (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet pci=noacpi"'
        in booted_lab.run(spec, "cat /etc/default/grub").stdout
    )
    restored = booted_lab.run(spec, grub).stdout

    again = run_playbook(
        "playbooks/rollback.yml",
        spec.name,
        "-e",
        "rollback_confirm=true",
        "-e",
        "kernel_cmdline_reboot=if_required",
    )
    assert again.rc == 0, again.stdout[-3000:]
    assert "iommu=pt" in booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert booted_lab.run(spec, grub).stdout != restored
