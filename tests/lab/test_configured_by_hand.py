"""A node configured by hand before the toolkit came (iommu=pt already in
GRUB_CMDLINE_LINUX_DEFAULT, in effect on the running kernel): the kernel parameters are
satisfied where they are. No drop-in, no update-grub, no reboot, nothing pending."""

from __future__ import annotations

import json

from lab_support import audit_findings, recap, run_playbook

PROFILE = "a6000-already-configured"
BOOT_FILES = (
    "md5sum /etc/default/grub /boot/grub/grub.cfg; ls /etc/default/grub.d/ 2>/dev/null; true"
)


def test_parameters_already_set_are_satisfied_and_nothing_boots_again(booted_lab, tmp_path):
    spec = booted_lab.node(PROFILE)
    assert "iommu=pt" in booted_lab.run(spec, "cat /proc/cmdline").stdout.split()
    boot_files = booted_lab.run(spec, BOOT_FILES).stdout
    boot_id = booted_lab.boot_id(spec)

    done = run_playbook("site.yml", spec.name, "-e", "kernel_cmdline_reboot=if_required")
    assert done.rc == 0, done.stdout[-4000:]
    [kernel] = done.results(spec.name, action="kernel_cmdline")
    assert kernel.changed is False, kernel.result
    assert kernel.result["actions"] == []
    # The grub files are untouched (no drop-in, grub.cfg not regenerated), no reboot.
    assert booted_lab.run(spec, BOOT_FILES).stdout == boot_files
    assert booted_lab.boot_id(spec) == boot_id
    [instance] = json.loads(booted_lab.run(spec, "cat /etc/lingbot/plan.json").stdout)["instances"]
    assert (instance["gpus"], instance["kv_cache_strategy"]) == ([0, 1], "p2p_direct")

    again = run_playbook("site.yml", spec.name)
    assert recap(again, spec.name)["changed"] == 0, again.changed_tasks(spec.name)
    # The audit agrees: nothing about the kernel, no reboot pending.
    codes = audit_findings(spec, tmp_path)
    assert not [code for code in codes if code.startswith(("KERNEL_", "REBOOT_"))], codes
    done = run_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    assert done.rc == 0, done.stdout[-4000:]
    assert booted_lab.run(spec, BOOT_FILES).stdout == boot_files
