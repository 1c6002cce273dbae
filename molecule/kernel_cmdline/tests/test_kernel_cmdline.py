"""The running kernel follows the policy after converge (read from /proc, not grub)."""

from __future__ import annotations


def test_running_cmdline_follows_policy(host):
    running = host.file("/proc/cmdline").content_string.split()
    assert "iommu=pt" in running
    assert "pci=noacpi" not in running


def test_dropin_holds_only_what_the_toolkit_adds(host):
    dropin = host.file("/etc/default/grub.d/lingbot-fleet.cfg")
    assert dropin.exists
    assert 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt"' in dropin.content_string
    assert "pci=noacpi" not in host.file("/etc/default/grub").content_string


def test_iommu_passthrough_and_numa_known(host):
    types = host.run("cat /sys/kernel/iommu_groups/*/type").stdout.split()
    assert types and set(types) == {"identity"}
    numa = host.run("cat /sys/bus/pci/devices/*/numa_node").stdout.split()
    assert numa and "-1" not in numa


def test_next_boot_is_the_running_kernel(host):
    """grub.cfg's default entry boots what runs: no reboot is left pending."""
    linux = host.run("grep -m1 -P '^\\s*linux\\s' /boot/grub/grub.cfg").stdout.split()
    running = host.file("/proc/cmdline").content_string.split()
    assert sorted(linux[2:]) == sorted(w for w in running if not w.startswith("BOOT_IMAGE="))
