"""The safety net under the faults it exists for, on lab nodes only these tests use.

Every test ends with the node usable again and proves that nothing was lost: the files the
toolkit changed come back, byte for byte (md5 of every file, and of every unit a link
enables), with one rollback to generation 0 (how the node was before the toolkit touched it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from lab_support import ANSIBLE_ENV, audited_node, recap, run_audit, run_playbook

from lingbot_fleet.lab import layout

TOOLKIT_FILES = (
    "find -L /etc/default/grub /etc/default/grub.d /etc/lingbot /etc/systemd/system "
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


def back_to_zero(spec, booted_lab) -> None:
    """Roll back to generation 0 when the toolkit has recorded a generation on the node (a
    node a test never let it change has none, and nothing to roll back)."""
    listing = booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations 2>/dev/null", check=False)
    if listing.stdout.split():
        rollback_to_zero(spec, booted_lab)


def pristine(spec, booted_lab) -> str:
    """The node as before the toolkit touched it (rolled back to 0 if it has generations),
    as the md5 of every file the toolkit may change."""
    back_to_zero(spec, booted_lab)
    assert not has_open_generation(booted_lab, spec)
    return booted_lab.run(spec, TOOLKIT_FILES).stdout


def lock_holder(booted_lab, spec) -> str:
    text = booted_lab.run(
        spec, "cat /var/lib/lingbot-fleet/generations/lock.json 2>/dev/null", check=False
    ).stdout
    return json.loads(text)["run_id"] if text.strip() else ""


def start_playbook(
    playbook: str, limit: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """ansible-playbook as a process of its own, for the tests that kill it or fault its
    nodes while it runs."""
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
        env={**os.environ, **ANSIBLE_ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def has_open_generation(booted_lab, spec) -> bool:
    return bool(booted_lab.run(spec, f"ls {PENDING} 2>/dev/null", check=False).stdout.strip())


# A module Ansible runs on the node (pipelining): `/bin/sh -c '<python> && sleep 0'`.
MODULE_RUNNING = "pgrep -f 'python3[.0-9]* && sleep 0'"


def settled(booted_lab, spec, timeout_s: float = 120) -> str:
    """TOOLKIT_FILES once no module has run on the node for two readings a second apart
    and the files did not move between them."""
    deadline = time.monotonic() + timeout_s
    previous = None
    while time.monotonic() < deadline:
        running = booted_lab.run(spec, MODULE_RUNNING, check=False).returncode == 0
        files = None if running else booted_lab.run(spec, TOOLKIT_FILES).stdout
        if files is not None and files == previous:
            return files
        previous = files
        time.sleep(1)
    raise AssertionError(f"{spec.name}: modules kept running for {timeout_s} s")


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


def test_a_reboot_that_comes_back_without_the_driver_fails_its_batch_and_stops(booted_lab):
    """The first node's reboot comes back without the NVIDIA driver (the lab's boot leaves
    the driver's state out, as a kernel the module was not built for does): its proof
    names the driver, and the next batch is not rebooted."""
    pair = sorted(
        [fault_nodes(booted_lab, "a6000-gen3"), fault_nodes(booted_lab, "a6000-x8")],
        key=lambda spec: spec.name,
    )
    broken, not_reached = pair
    originals = {spec.name: pristine(spec, booted_lab) for spec in pair}
    # Booted into the configuration as it was before the toolkit (an earlier test may have
    # left a kernel with the parameters running): both need the reboot this run makes.
    for spec in pair:
        booted_lab.reboot(spec)
    boot_of_not_reached = booted_lab.boot_id(not_reached)
    booted_lab.run(broken, with_fault({"kind": "driver_not_loaded"}))
    try:
        done = run_playbook(
            "site.yml",
            ",".join(spec.name for spec in pair),
            *REBOOT,
            "-e",
            "kernel_cmdline_reboot_batch=1",
        )
        assert done.rc != 0, done.stdout[-4000:]
        failure = done.failed_tasks(broken.name)[-1]
        message = failure.result["msg"]
        assert message.startswith(f"{broken.name} was rebooted to apply the kernel"), message
        assert "the GPUs did not come back: the NVIDIA driver is not loaded after the" in message
        assert "No further node of this play is rebooted." in message
        # Its whole batch failed, so Ansible ends the play there: the next batch's node is
        # never reached, let alone rebooted. (A batch that only partly fails lets the next
        # one run into "Stop the rolling reboot": the node that never comes back shows it.)
        assert not done.results(not_reached.name, action="kernel_cmdline")
        assert booted_lab.boot_id(not_reached) == boot_of_not_reached
    finally:
        booted_lab.run(broken, "mv /root/profile.json /opt/lingbot-lab/profile.json")
        booted_lab.reboot(broken)
    for spec in pair:
        back_to_zero(spec, booted_lab)
        assert booted_lab.run(spec, TOOLKIT_FILES).stdout == originals[spec.name]


# A kernel update whose DKMS build failed: the image and an empty modules directory, made
# grub's default entry by update-grub (the newest kernel first), as the kernel's package does.
NEWER_KERNEL = "6.1.0-99-amd64"
INSTALL_NEWER_KERNEL = (
    f"touch /boot/vmlinuz-{NEWER_KERNEL} /boot/initrd.img-{NEWER_KERNEL} && "
    f"mkdir -p /lib/modules/{NEWER_KERNEL}/kernel && "
    f"touch /lib/modules/{NEWER_KERNEL}/modules.dep && update-grub"
)
REMOVE_NEWER_KERNEL = (
    f"rm -rf /boot/vmlinuz-{NEWER_KERNEL} /boot/initrd.img-{NEWER_KERNEL} "
    f"/lib/modules/{NEWER_KERNEL} && update-grub"
)


def test_a_next_boot_without_the_nvidia_module_is_not_rebooted_into(booted_lab, tmp_path):
    """The default boot entry's kernel has no NVIDIA module: the node that needs a reboot
    is not rebooted, fails naming the kernel and the fix, and the audit reports it."""
    spec = fault_nodes(booted_lab, "a6000-gen3")
    original = pristine(spec, booted_lab)
    # Booted into the configuration as it was before the toolkit: this run needs a reboot.
    booted_lab.reboot(spec)
    boot = booted_lab.boot_id(spec)
    booted_lab.run(spec, INSTALL_NEWER_KERNEL)
    try:
        done = run_playbook("site.yml", spec.name, *REBOOT)
        assert done.rc != 0, done.stdout[-4000:]
        failure = done.failed_tasks(spec.name)[-1]
        assert failure.task.endswith("Refuse a reboot that would lose the GPU driver"), failure.task
        assert failure.result["msg"].startswith(
            "not rebooted, the node keeps running as it is: the next boot's kernel "
            f"{NEWER_KERNEL} has no NVIDIA kernel module (/lib/modules/{NEWER_KERNEL}: "
        ), failure.result["msg"]
        assert f"dkms autoinstall -k {NEWER_KERNEL}" in failure.result["msg"]
        assert booted_lab.boot_id(spec) == boot
        audit = run_audit(spec, tmp_path)
        assert audit.returncode == 1, audit.stdout + audit.stderr
        findings = audited_node(tmp_path)["findings"]
        [lost] = [f for f in findings if f["code"] == "NEXT_BOOT_LOSES_GPU_DRIVER"]
        assert lost["severity"] == "error"
        assert lost["evidence"]["kernel"] == NEWER_KERNEL
        assert lost["evidence"]["state"] == "missing"
    finally:
        booted_lab.run(spec, REMOVE_NEWER_KERNEL)
    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original


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


def test_a_rollback_whose_controller_died_is_waited_for_while_its_module_runs_on(booted_lab):
    # A dead controller does not stop the module it started: it runs on, on the node. Here
    # each unit the rollback takes away takes 6 s to stop, just before the files are
    # swapped in: the next rollback must wait for the first module, not plan and swap the
    # same files beside it (it would find them gone under its hands).
    spec = fault_nodes(booted_lab, "a6000-gen3")
    original = pristine(spec, booted_lab)
    converge = run_playbook("site.yml", spec.name)
    assert converge.rc == 0, converge.stdout[-4000:]
    shim = "/usr/local/sbin/systemctl"
    booted_lab.run(
        spec,
        f"printf '%s\\n' '#!/bin/sh' "
        '\'case "$1 $2" in "disable --now") touch /run/slow-disable; sleep 6;; esac\' '
        f"'exec /usr/bin/systemctl \"$@\"' > {shim} && chmod 0755 {shim}",
    )
    try:
        killed = start_playbook(
            "playbooks/rollback.yml",
            spec.name,
            "-e",
            "rollback_confirm=true",
            "-e",
            "rollback_to=0",
        )
        wait_for(
            lambda: booted_lab.run(spec, "test -e /run/slow-disable", check=False).returncode == 0,
            120,
            "the rollback stopping the units it takes away",
        )
        os.killpg(killed.pid, signal.SIGKILL)
        killed.wait(timeout=30)
        assert booted_lab.run(spec, "pgrep -f 'sleep 6'", check=False).returncode == 0
        rollback_to_zero(spec, booted_lab)
    finally:
        booted_lab.run(spec, f"rm -f {shim} /run/slow-disable")
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original
    assert not has_open_generation(booted_lab, spec)
    listing = booted_lab.run(spec, "ls /var/lib/lingbot-fleet/generations").stdout.split()
    numbers = sorted(int(name) for name in listing if name.isdigit())
    assert numbers == list(range(numbers[0], numbers[-1] + 1)), listing
    assert recap(run_playbook("site.yml", spec.name), spec.name)["changed"] > 0
    rollback_to_zero(spec, booted_lab)
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original


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
    # run wants to write: the second refuses, naming the first, and writes nothing. The
    # pause stops the first run's controller, not a module it has already sent to the node
    # (its SSH session may even start it a moment later): that one ends first, so what is
    # on the node before the second run is all the first run wrote.
    os.killpg(first.pid, signal.SIGSTOP)
    try:
        before_second = settled(booted_lab, spec)
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


def test_a_node_lost_in_the_middle_of_a_rollout_stops_it_and_nothing_is_lost(booted_lab):
    specs = sorted(
        [*booted_lab.nodes("a6000-x8"), *booted_lab.nodes("a6000-gen3")], key=lambda n: n.name
    )
    # Batches [canary], [passes, lost], [not reached]: Ansible alone would start the last
    # batch, since one node of the second passed.
    canary, passes, lost, not_reached = specs
    original = {spec.name: pristine(spec, booted_lab) for spec in specs}
    limit = ",".join(spec.name for spec in specs)
    converge = run_playbook("site.yml", limit, *REBOOT)
    assert converge.rc == 0, converge.stdout[-4000:]
    before = {spec.name: booted_lab.run(spec, TOOLKIT_FILES).stdout for spec in specs}
    change = {
        "lingbot_service_config_overrides": {"kv_cache_sync_interval_ms": 20},
        "rollout_batches": [1, 2, 1],
        # The x8 and Gen3 links are findings on purpose: the link gate would fail them.
        "rollout_gate_link_fail_on": "never",
    }
    # One output line per summary line (the yaml result format wraps long ones).
    rollout = start_playbook(
        "playbooks/rollout.yml",
        limit,
        "-e",
        json.dumps(change),
        env={"ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )
    try:
        # Lost once its change has saved its first file: the rollout holds its lock.
        wait_for(
            lambda: lock_holder(booted_lab, lost).endswith(f"-p{rollout.pid}"),
            600,
            f"the rollout taking {lost.name}'s lock",
        )
        booted_lab.inside(
            lost,
            "systemctl mask --runtime ssh.service ssh.socket && systemctl stop ssh.service "
            "&& pkill -KILL -x sshd; true",
        )
        output = rollout.communicate(timeout=900)[0]
        assert rollout.returncode == 4, output[-4000:]
        assert f"batch 1/3 (canary) {canary.name}: passed" in output
        assert f"batch 2/3 {passes.name}: passed" in output
        assert f"batch 2/3 {lost.name}: LOST during its change: it became unreachable" in output
        assert f"batch 3/3 {not_reached.name}: not reached" in output
        assert (
            f"rollout stopped after batch 2/3: {lost.name} became unreachable; the nodes not "
            "reached are unchanged"
        ) in output
        assert booted_lab.run(not_reached, TOOLKIT_FILES).stdout == before[not_reached.name]
        assert not has_open_generation(booted_lab, not_reached)
        for changed in (canary, passes):
            for instance in node_plan(booted_lab, changed)["instances"]:
                config = booted_lab.run(
                    changed, f"cat /etc/lingbot/{instance['name']}/config.yaml"
                ).stdout
                assert "kv_cache_sync_interval_ms: 20" in config, (changed.name, instance)
    finally:
        if rollout.poll() is None:
            os.killpg(rollout.pid, signal.SIGKILL)
            rollout.wait(timeout=30)
        booted_lab.inside(
            lost, "systemctl unmask --runtime ssh.service ssh.socket; systemctl start ssh.service"
        )
    wait_for(lambda: booted_lab.lab.ssh_ok(lost), 60, f"{lost.name} answering SSH again")
    # Back: the next run finishes what the rollout left open, and every node goes back
    # to how it was before the toolkit, byte for byte.
    assert has_open_generation(booted_lab, lost)
    again = run_playbook("site.yml", lost.name)
    assert again.rc == 0, again.stdout[-4000:]
    assert not has_open_generation(booted_lab, lost)
    for spec in specs:
        rollback_to_zero(spec, booted_lab)
        assert booted_lab.run(spec, TOOLKIT_FILES).stdout == original[spec.name], spec.name


def test_the_single_gpu_fallback_runs_lingbot_on_one_gpu_until_rolled_back(booted_lab):
    spec = booted_lab.node("a6000-persistenced-off")
    converge = run_playbook("site.yml", spec.name)
    assert converge.rc == 0, converge.stdout[-4000:]
    assert [i["gpus"] for i in node_plan(booted_lab, spec)["instances"]] == [[0, 1]]
    before = booted_lab.run(spec, TOOLKIT_FILES).stdout

    fallback = run_playbook(
        "playbooks/rollback.yml",
        spec.name,
        "-e",
        "rollback_confirm=true",
        "-e",
        "lingbot_mode=single_gpu",
    )
    assert fallback.rc == 0, fallback.stdout[-4000:]
    # Every instance on one GPU, each GPU of the node serving once.
    instances = node_plan(booted_lab, spec)["instances"]
    assert sorted(gpu for i in instances for gpu in i["gpus"]) == [0, 1]
    assert [len(i["gpus"]) for i in instances] == [1] * len(instances)
    visible = []
    for instance in instances:
        name = instance["name"]
        config = booted_lab.run(spec, f"cat /etc/lingbot/{name}/config.yaml").stdout
        assert "gpu:0" in config and "gpu:1" not in config, name
        # LingBot took the whole configuration and serves on one GPU: its metrics say so.
        serving = booted_lab.python(spec, SERVING.replace("@main.", f"@{name}."))
        assert serving["gpus_argument"] == "0", name
        assert serving["balancer_gpus"] == ["gpu:0"], name
        visible += serving["visible"].split(",")
    assert len(set(visible)) == 2

    leave = run_playbook("playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true")
    assert leave.rc == 0, leave.stdout[-4000:]
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == before
    [instance] = node_plan(booted_lab, spec)["instances"]
    serving = booted_lab.python(spec, SERVING.replace("@main.", f"@{instance['name']}."))
    assert serving["gpus_argument"] == "0,1"
    assert serving["balancer_gpus"] == ["gpu:0", "gpu:1"]


SERVING = r"""
import json, re, subprocess, urllib.request
pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", "lingbot@main.service"],
                     capture_output=True, text=True).stdout.strip()
argv = open(f"/proc/{pid}/cmdline").read().split("\0")
env = dict(line.split("=", 1) for line in open(f"/proc/{pid}/environ").read().split("\0")
           if "=" in line)
port = argv[argv.index("--port") + 1] if "--port" in argv else "8000"
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
gpus = sorted(set(re.findall(r'lingbot_balancer_weight\{gpu="(gpu:[0-9]+)"\}', metrics)))
print(json.dumps({"gpus_argument": argv[argv.index("--gpus") + 1],
                  "visible": env.get("CUDA_VISIBLE_DEVICES", ""), "balancer_gpus": gpus}))
"""


def is_active(booted_lab, spec, instance: str) -> bool:
    unit = f"lingbot@{instance}.service"
    return booted_lab.run(spec, f"systemctl is-active {unit}", check=False).stdout.strip() == (
        "active"
    )


def node_plan(booted_lab, spec) -> dict:
    return json.loads(booted_lab.run(spec, "cat /etc/lingbot/plan.json").stdout)


def with_fault(fault: dict) -> str:
    """The node's profile with one fault (the original kept in /root/profile.json)."""
    return (
        'cp /opt/lingbot-lab/profile.json /root/profile.json && python3 -c "import json; '
        "p='/opt/lingbot-lab/profile.json'; d=json.load(open(p)); "
        f"d['faults'] = [{fault!r}]; json.dump(d, open(p, 'w'))\""
    )


def gpu_bus_id(done, spec, index: int) -> str:
    facts = done.results(spec.name, action="gpu_facts")[0]
    return facts.result["ansible_facts"]["lingbot_gpu"]["gpus"][index]["bus_id"]


def assert_failed_at_the_end_for(done, spec, code: str, bus_id: str) -> None:
    """gpu_checks_fail_on=error: the node fails, but only in the last play, after LingBot
    was planned around the GPU."""
    assert done.rc != 0
    [failure] = done.failed_tasks(spec.name)
    assert failure.task == "Fail the nodes whose link findings reach gpu_checks_fail_on"
    assert f"{code} {bus_id}: " in failure.result["msg"]
    assert "LingBot was planned with these findings" in failure.result["msg"]


def test_a_lost_gpu_is_a_critical_finding_and_lingbot_runs_on_the_others(booted_lab):
    spec = booted_lab.nodes("a6000-gen3")[0]
    booted_lab.run(spec, with_fault({"kind": "gpu_lost", "gpu": 1}))
    booted_lab.reboot(spec)
    try:
        done = run_playbook(
            "site.yml", spec.name, "-e", "p2p_probe_max_age_s=0", "-e", "gpu_checks_fail_on=error"
        )
        [checks] = done.results(spec.name, action="gpu_link_check")
        lost = [f for f in checks.result["findings"] if f["code"] == "GPU_LOST"]
        bus_id = gpu_bus_id(done, spec, 1)
        assert [(f["severity"], f["subject"]) for f in lost] == [("critical", bus_id)]
        assert_failed_at_the_end_for(done, spec, "GPU_LOST", bus_id)
        [instance] = node_plan(booted_lab, spec)["instances"]
        assert instance["gpus"] == [0]
        assert is_active(booted_lab, spec, instance["name"])
        assert not has_open_generation(booted_lab, spec)
    finally:
        booted_lab.run(spec, "mv /root/profile.json /opt/lingbot-lab/profile.json")
        booted_lab.reboot(spec)


def test_a_gpu_failing_mid_probe_is_named_and_lingbot_moves_to_the_healthy_one(booted_lab):
    spec = booted_lab.nodes("a6000-gen3")[0]
    # GPU 0, the primary LingBot used, stops answering after its first copies of the probe.
    booted_lab.run(spec, with_fault({"kind": "device_fails_after_copies", "gpu": 0, "copies": 8}))
    booted_lab.reboot(spec)
    try:
        done = run_playbook(
            "site.yml", spec.name, "-e", "p2p_probe_max_age_s=0", "-e", "gpu_checks_fail_on=error"
        )
        bus_id = gpu_bus_id(done, spec, 0)
        [probe] = done.results(spec.name, action="p2p_probe")
        failed = probe.result["probe"]["gpus"][0]
        # Its context died during the probe: named, with the driver's error.
        assert failed["error"].startswith(f"GPU 0 ({bus_id})")
        assert "CUDA_ERROR_LAUNCH_FAILED" in failed["error"]
        [checks] = done.results(spec.name, action="gpu_link_check")
        named = [
            (f["severity"], f["subject"])
            for f in checks.result["findings"]
            if f["code"] == "PROBE_GPU_FAILED"
        ]
        assert named == [("critical", bus_id)]
        assert_failed_at_the_end_for(done, spec, "PROBE_GPU_FAILED", bus_id)
        [instance] = node_plan(booted_lab, spec)["instances"]
        assert instance["gpus"] == [1]
        assert is_active(booted_lab, spec, instance["name"])
    finally:
        booted_lab.run(spec, "mv /root/profile.json /opt/lingbot-lab/profile.json")
        booted_lab.reboot(spec)
