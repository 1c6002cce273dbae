"""A changed grub command line takes effect at the next boot, and only then."""

from __future__ import annotations

DROPIN = "/etc/default/grub.d/50-lab-reboot-test.cfg"


def test_reboot_applies_grub_cmdline(booted_lab):
    spec = booted_lab.node("a6000-phb")
    first_boot = booted_lab.boot_id(spec)
    assert "lab_reboot_marker=1" not in booted_lab.run(spec, "cat /proc/cmdline").stdout

    booted_lab.run(
        spec,
        f"echo 'GRUB_CMDLINE_LINUX=\"$GRUB_CMDLINE_LINUX lab_reboot_marker=1\"' > {DROPIN}"
        " && update-grub",
    )
    grub_cfg = booted_lab.run(spec, "cat /boot/grub/grub.cfg").stdout
    assert "lab_reboot_marker=1" in grub_cfg
    assert "lab_reboot_marker=1" not in booted_lab.run(spec, "cat /proc/cmdline").stdout

    second_boot = booted_lab.reboot(spec)
    assert second_boot != first_boot
    assert "lab_reboot_marker=1" in booted_lab.run(spec, "cat /proc/cmdline").stdout.split()

    booted_lab.run(spec, f"rm {DROPIN} && update-grub")
    booted_lab.reboot(spec)
    assert "lab_reboot_marker=1" not in booted_lab.run(spec, "cat /proc/cmdline").stdout
