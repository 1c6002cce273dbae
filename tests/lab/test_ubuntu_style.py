"""An Ubuntu 24.04 node (grub.cfg lines end in $vt_handoff, /proc/cmdline in vt.handoff=7)
with pci=noacpi: fixed and rebooted once; then nothing is pending, a second run changes
nothing and does not reboot, the audit has no kernel finding, and a rollback to
generation 0 restores the grub files."""

from __future__ import annotations

from lab_support import audit_findings, recap, run_playbook

PROFILE = "a6000-ubuntu-vt-handoff"
GRUB_FILES = "md5sum /etc/default/grub /etc/default/grub.d/*.cfg 2>/dev/null; true"


def test_ubuntu_node_is_fixed_rebooted_once_and_then_left_alone(booted_lab, tmp_path):
    spec = booted_lab.node(PROFILE)
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert "pci=noacpi" in running
    assert running[-1] == "vt.handoff=7"
    # The simple and the advanced entry end with $vt_handoff (recovery does not).
    handoff_lines = "grep -c ' [$]vt_handoff$' /boot/grub/grub.cfg"
    assert booted_lab.run(spec, handoff_lines).stdout == "2\n"
    grub_before = booted_lab.run(spec, GRUB_FILES).stdout
    boot_before = booted_lab.boot_id(spec)

    applied = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert applied.rc == 0, applied.stdout[-4000:]
    assert recap(applied, spec.name)["failed"] == 0
    rebooted = booted_lab.boot_id(spec)
    assert rebooted != boot_before, "the node did not reboot"
    running = booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    assert "iommu=pt" in running
    assert "pci=noacpi" not in running
    assert running[-1] == "vt.handoff=7"

    again = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert again.rc == 0, again.stdout[-4000:]
    assert recap(again, spec.name)["changed"] == 0, again.changed_tasks(spec.name)
    assert booted_lab.boot_id(spec) == rebooted, "a converged node rebooted"

    codes = audit_findings(spec, tmp_path)
    assert not [code for code in codes if code.startswith(("KERNEL_", "REBOOT_"))], codes

    rolled = run_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    assert rolled.rc == 0, rolled.stdout[-4000:]
    assert booted_lab.run(spec, GRUB_FILES).stdout == grub_before
