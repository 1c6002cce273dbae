"""kernel_cmdline on the RHEL 8 ($kernelopts, linked grubenv) and RHEL 9
(/etc/kernel/cmdline, literal options) profiles: fix, reboot, prove, converge, roll back."""

from __future__ import annotations

import pytest
from lab_support import recap, run_playbook
from test_faults import rollback_to_zero

REBOOT = ("-e", "kernel_cmdline_reboot=if_required")
# Every file the toolkit or grubby may change on a RedHat node, links followed (the RHEL 8
# grubenv lives on the EFI partition), and the links themselves.
BOOT_FILES = (
    "find -L /etc/default/grub /etc/kernel /boot/loader/entries /boot/grub2/grubenv "
    "/boot/efi/EFI/redhat/grubenv /etc/lingbot /etc/systemd/system /etc/modules-load.d "
    "/etc/lingbot-fleet -type f 2>/dev/null | sort | xargs -r md5sum; "
    "ls -l /boot/grub2/grubenv | sed 's/.* -> /link -> /'"
)
# profile -> (a parameter the fix removes or None, the parameter it adds)
PROFILES = {
    "rhel8-bls-kernelopts": ("pci=noacpi", "iommu=pt"),
    "rhel9-bls-kernel-cmdline": (None, "iommu=pt"),
}


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_redhat_family_fixed_rebooted_converged_and_rolled_back(booted_lab, profile):
    spec = booted_lab.node(profile)
    removed, added = PROFILES[profile]
    original = booted_lab.run(spec, BOOT_FILES).stdout
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert added not in running
    if removed:
        assert removed in running
    boot_before = booted_lab.boot_id(spec)

    applied = run_playbook("site.yml", spec.name, *REBOOT)
    assert applied.rc == 0, applied.stdout[-4000:]
    assert recap(applied, spec.name)["failed"] == 0
    assert booted_lab.boot_id(spec) != boot_before, "the node did not reboot"
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert added in running
    if removed:
        assert removed not in running
    types = booted_lab.run(spec, "cat /sys/kernel/iommu_groups/*/type | sort -u").stdout.split()
    assert types == ["identity"]
    numa = booted_lab.run(spec, "cat /sys/bus/pci/devices/*/numa_node | sort -u").stdout.split()
    assert "-1" not in numa
    if profile == "rhel8-bls-kernelopts":
        assert booted_lab.run(spec, "readlink /boot/grub2/grubenv").stdout.strip() == (
            "../efi/EFI/redhat/grubenv"
        )
        grubenv = booted_lab.run(spec, "cat /boot/efi/EFI/redhat/grubenv").stdout.split()
        assert added in grubenv
        assert removed not in grubenv
    else:
        cmdline_file = booted_lab.run(spec, "cat /etc/kernel/cmdline").stdout.split()
        assert added in cmdline_file

    again = run_playbook("site.yml", spec.name, *REBOOT)
    assert again.rc == 0, again.stdout[-4000:]
    assert recap(again, spec.name)["changed"] == 0, again.changed_tasks(spec.name)

    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, BOOT_FILES).stdout == original
