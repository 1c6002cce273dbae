"""The safety net under the faults it exists for, on lab nodes only these tests use.

Every test ends with the node usable again and proves that nothing was lost: the files the
toolkit changed come back, byte for byte (md5 of every file), with one rollback to
generation 0 (how the node was before the toolkit touched it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from lab_support import ANSIBLE_ENV, recap, run_playbook

from lingbot_fleet.lab import layout

TOOLKIT_FILES = (
    "find /etc/default/grub /etc/default/grub.d /etc/lingbot /etc/systemd/system "
    "/etc/modules-load.d /etc/lingbot-fleet -type f 2>/dev/null | sort | xargs -r md5sum"
)
PENDING = "/var/lib/lingbot-fleet/generations/pending"
REBOOT = ("-e", "kernel_cmdline_reboot=if_required")


def fault_nodes(booted_lab, profile: str):
    """The node of ``profile`` that no other test uses (the lab boots two of each)."""
    return booted_lab.nodes(profile)[-1]


def rollback_to_zero(spec, booted_lab) -> None:
    done = run_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    assert done.rc == 0, done.stdout[-4000:]


def pristine(spec, booted_lab) -> str:
    """The node as before the toolkit touched it (rolled back to 0 if it has generations),
    as the md5 of every file the toolkit may change."""
    listing = booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations 2>/dev/null", check=False)
    if listing.stdout.split():
        rollback_to_zero(spec, booted_lab)
    assert not has_open_generation(booted_lab, spec)
    return booted_lab.run(spec, TOOLKIT_FILES).stdout


def lock_holder(booted_lab, spec) -> str:
    text = booted_lab.run(
        spec, "cat /var/lib/lingbot-fleet/generations/lock.json 2>/dev/null", check=False
    ).stdout
    return json.loads(text)["run_id"] if text.strip() else ""


def start_playbook(playbook: str, limit: str, *extra: str) -> subprocess.Popen:
    """ansible-playbook as a process of its own, for the tests that kill it."""
    return subprocess.Popen(
        [
            os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
            "-i",
            str(layout.LAB_INVENTORY),
            str(layout.REPO_ROOT / playbook),
            "-l",
            limit,
            *extra,
        ],
        cwd=layout.REPO_ROOT,
        env={**os.environ, **ANSIBLE_ENV},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def has_open_generation(booted_lab, spec) -> bool:
    return bool(booted_lab.run(spec, f"ls {PENDING} 2>/dev/null", check=False).stdout.strip())


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} did not happen within {timeout_s} s")


def test_a_node_that_never_comes_back_stops_the_rolling_reboot(booted_lab):
    first, second = booted_lab.nodes("a6000-gen3")[-1], booted_lab.nodes("a6000-x8")[0]
    third = booted_lab.nodes("a6000-x8")[-1]
    order = sorted([first, second, third], key=lambda spec: spec.name)
    # Batches of two: [lost, ok] then [the last]. The first node's sshd will not start again.
    lost, rebooted, not_reached = order[0], order[1], order[2]
    boots = {spec.name: booted_lab.boot_id(spec) for spec in order}
    booted_lab.run(lost, "systemctl mask ssh.service")
    try:
        done = run_playbook(
            "site.yml",
            ",".join(spec.name for spec in order),
            *REBOOT,
            "-e",
            "kernel_cmdline_reboot_batch=2",
            "-e",
            "kernel_cmdline_reboot_timeout_s=30",
        )
        assert done.rc != 0
        failure = done.failed_tasks(lost.name)[-1]
        assert failure.result["msg"].startswith(f"{lost.name} was rebooted to apply the kernel")
        assert "No further node of this play is rebooted." in failure.result["msg"]
        [stopped] = done.failed_tasks(not_reached.name)
        assert stopped.result["msg"].startswith(
            f"not rebooted: the rolling reboot stopped because {lost.name} failed earlier"
        )
        assert booted_lab.boot_id(not_reached) == boots[not_reached.name]
        assert booted_lab.boot_id(rebooted) != boots[rebooted.name]
    finally:
        booted_lab.inside(lost, "systemctl unmask ssh.service && systemctl start ssh.service")
    wait_for(lambda: booted_lab.lab.ssh_ok(lost), 60, f"{lost.name} answering SSH again")
    for spec in order:
        rollback_to_zero(spec, booted_lab)


def test_a_killed_provision_run_is_finished_by_the_next_and_nothing_is_lost(booted_lab):
    spec = fault_nodes(booted_lab, "a6000-gen3")
    original = pristine(spec, booted_lab)
    killed = start_playbook("site.yml", spec.name)
    # Killed once the run has saved its first file: it holds the node's lock, and its
    # generation is open on the node.
    wait_for(
        lambda: lock_holder(booted_lab, spec).endswith(f"-p{killed.pid}"),
        240,
        "the run taking the node's lock",
    )
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)

    again = run_playbook("site.yml", spec.name)
    assert again.rc == 0, again.stdout[-4000:]
    converged = run_playbook("site.yml", spec.name)
    assert recap(converged, spec.name)["changed"] == 0, converged.changed_tasks(spec.name)
    assert not has_open_generation(booted_lab, spec)

    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original


def test_a_killed_rollback_is_finished_by_the_next_and_nothing_is_lost(booted_lab):
    spec = fault_nodes(booted_lab, "a6000-gen3")
    original = pristine(spec, booted_lab)
    converge = run_playbook("site.yml", spec.name)
    assert converge.rc == 0, converge.stdout[-4000:]
    killed = start_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    wait_for(
        lambda: (
            "lock.json"
            in booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations", check=False).stdout
        ),
        120,
        "the rollback taking the node's lock",
    )
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    # rollback_to is idempotent: whatever the killed run got done, this one finishes it.
    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original
    assert not has_open_generation(booted_lab, spec)


def test_two_runs_at_once_on_one_node_one_refuses_and_nothing_is_lost(booted_lab):
    spec = fault_nodes(booted_lab, "a6000-x8")
    original = pristine(spec, booted_lab)
    first = start_playbook("site.yml", spec.name)
    # The run id names the ansible-playbook process: the first run holds the lock.
    wait_for(
        lambda: lock_holder(booted_lab, spec).endswith(f"-p{first.pid}"),
        240,
        "the first run taking the node's lock",
    )
    # The first run holds the node's lock and is still running (paused) while a second
    # run wants to write: the second refuses, naming the first, and writes nothing.
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        before_second = booted_lab.run(spec, TOOLKIT_FILES).stdout
        second = run_playbook("site.yml", spec.name)
        assert second.rc != 0
        [refused] = second.failed_tasks(spec.name)
        assert "another toolkit run is changing this node: run " in refused.result["msg"]
        assert booted_lab.run(spec, TOOLKIT_FILES).stdout == before_second
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    output = first.communicate(timeout=600)[0]
    assert first.returncode == 0, output[-4000:]
    after = run_playbook("site.yml", spec.name)
    assert after.rc == 0, after.stdout[-4000:]
    assert recap(run_playbook("site.yml", spec.name), spec.name)["changed"] == 0
    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original


def test_update_grub_failing_once_is_converged_by_the_next_run(booted_lab):
    spec = fault_nodes(booted_lab, "a6000-x8")
    original = pristine(spec, booted_lab)
    real = booted_lab.run(spec, "command -v update-grub").stdout.strip()
    booted_lab.run(
        spec,
        f"mv {real} {real}.real && printf '%s\\n' '#!/bin/sh' "
        f"'if [ ! -e /run/update-grub-failed ]; then touch /run/update-grub-failed; "
        f'echo "grub-probe: error: failed to get canonical path of /boot" >&2; exit 1; fi\' '
        f"'exec {real}.real \"$@\"' > {real} && chmod 0755 {real}",
    )
    try:
        failed = run_playbook("site.yml", spec.name)
        assert failed.rc != 0
        [task] = failed.failed_tasks(spec.name)
        assert "grub-probe: error: failed to get canonical path of /boot" in task.result["msg"]
        assert "grub.cfg is regenerated by the next run" in task.result["msg"]
        assert "iommu=pt" not in booted_lab.run(spec, "cat /boot/grub/grub.cfg").stdout

        again = run_playbook("site.yml", spec.name)
        assert again.rc == 0, again.stdout[-4000:]
        assert "iommu=pt" in booted_lab.run(spec, "cat /boot/grub/grub.cfg").stdout
        assert recap(run_playbook("site.yml", spec.name), spec.name)["changed"] == 0
    finally:
        booted_lab.run(spec, f"mv {real}.real {real}")
    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original


def test_a_lost_gpu_is_a_critical_finding_and_lingbot_runs_on_the_others(booted_lab):
    spec = booted_lab.nodes("a6000-gen3")[0]
    lose_gpu = (
        "python3 -c \"import json; p='/opt/lingbot-lab/profile.json'; d=json.load(open(p)); "
        "d['faults'] = [{'kind': 'gpu_lost', 'gpu': 1}]; json.dump(d, open(p, 'w'))\""
    )
    booted_lab.run(spec, f"cp /opt/lingbot-lab/profile.json /root/profile.json && {lose_gpu}")
    booted_lab.reboot(spec)
    try:
        done = run_playbook("site.yml", spec.name, "-e", "p2p_probe_max_age_s=0")
        assert done.rc == 0, done.stdout[-4000:]
        [checks] = done.results(spec.name, action="gpu_link_check")
        lost = [f for f in checks.result["findings"] if f["code"] == "GPU_LOST"]
        assert [(f["severity"], f["subject"]) for f in lost] == [
            (
                "critical",
                done.results(spec.name, action="gpu_facts")[0].result["ansible_facts"][
                    "lingbot_gpu"
                ]["gpus"][1]["bus_id"],
            )
        ]
        plan = json.loads(booted_lab.run(spec, "cat /etc/lingbot/plan.json").stdout)
        [instance] = plan["instances"]
        assert instance["gpus"] == [0]
        assert booted_lab.run(spec, "systemctl is-active lingbot@main.service").stdout.strip() == (
            "active"
        )
    finally:
        booted_lab.run(spec, "mv /root/profile.json /opt/lingbot-lab/profile.json")
        booted_lab.reboot(spec)
