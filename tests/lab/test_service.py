"""Issue bar for lingbot_service on the lab: the planned instances run under real systemd,
bound and ordered as planned; a second run changes nothing; check/diff and bad overrides
write nothing."""

from __future__ import annotations

import json
import time

from lab_support import RUN_MONITOR_ONCE, audited_node, recap, run_audit, run_playbook

NODES = ("a6000-phb", "a6000-chipset", "h100-sxm-nvswitch", "a6000-iommu-acs", "a6000-dual-socket")
TOOLKIT_FILES = "find /etc/lingbot /etc/systemd/system -type f 2>/dev/null | sort | xargs -r md5sum"
RUNNING = r"""
import json, subprocess
units = subprocess.run(["systemctl", "list-units", "lingbot@*", "--no-legend", "--plain",
                        "--state=running"], capture_output=True, text=True).stdout.split()
out = {}
for unit in [u for u in units if u.startswith("lingbot@")]:
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    env = dict(line.split("=", 1) for line in
               open(f"/proc/{pid}/environ").read().split("\0") if "=" in line)
    argv = open(f"/proc/{pid}/cmdline").read().split("\0")
    out[unit] = {"argv": argv, "numactl": env.get("LINGBOT_LAB_NUMACTL_REQUEST"),
                 "visible": env.get("CUDA_VISIBLE_DEVICES"), "order": env.get("CUDA_DEVICE_ORDER")}
out["plan"] = json.load(open("/etc/lingbot/plan.json"))
print(json.dumps(out))
"""


def _argument(argv: list[str], option: str) -> str:
    return argv[argv.index(option) + 1]


def test_planned_instances_run_bound_and_ordered(booted_lab):
    specs = [booted_lab.node(profile) for profile in NODES]
    limit = ",".join(spec.name for spec in specs)
    first = run_playbook("site.yml", limit)
    assert first.rc == 0, first.stdout[-4000:]

    phb = booted_lab.python(specs[0], RUNNING)
    main = phb["lingbot@main.service"]
    instance = phb["plan"]["instances"][0]
    assert _argument(main["argv"], "--gpus") == "0,1"
    assert main["numactl"] == "--cpunodebind=0 --membind=0"
    assert main["order"] == "PCI_BUS_ID"
    assert main["visible"] == ",".join(instance["gpu_uuids"])
    assert instance["kv_cache_strategy"] == "p2p_direct"

    # P2P below the threshold: every GPU still serves, one instance each, with the reason.
    chipset = booted_lab.python(specs[1], RUNNING)
    assert sorted(unit for unit in chipset if unit != "plan") == [
        "lingbot@numa0-1.service",
        "lingbot@numa0-2.service",
    ]
    assert [_argument(chipset[u]["argv"], "--gpus") for u in sorted(chipset) if u != "plan"] == [
        "0",
        "0",
    ]
    chipset_uuids = [i["gpu_uuids"] for i in chipset["plan"]["instances"]]
    assert [
        chipset[f"lingbot@{i['name']}.service"]["visible"] for i in chipset["plan"]["instances"]
    ] == [",".join(uuids) for uuids in chipset_uuids]
    assert len({uuid for uuids in chipset_uuids for uuid in uuids}) == 2
    assert "below p2p_min_gbytes_per_s" in chipset["plan"]["instances"][0]["reasons"]["gpus"]

    # IOMMU translating (no reboot yet): the peer data check fails, so no p2p_direct.
    acs = booted_lab.python(specs[3], RUNNING)
    assert {i["kv_cache_strategy"] for i in acs["plan"]["instances"]} == {"host_fallback"}
    assert "data check failed" in acs["plan"]["instances"][0]["reasons"]["gpus"]
    # One GPU per socket: an instance per GPU, each bound to its GPU's NUMA node.
    split = booted_lab.python(specs[4], RUNNING)
    assert sorted(unit for unit in split if unit != "plan") == [
        "lingbot@numa0.service",
        "lingbot@numa1.service",
    ]
    assert split["lingbot@numa0.service"]["numactl"] == "--cpunodebind=0 --membind=0"
    assert split["lingbot@numa1.service"]["numactl"] == "--cpunodebind=1 --membind=1"
    assert _argument(split["lingbot@numa1.service"]["argv"], "--gpus") == "0"
    assert "NUMA" in split["plan"]["instances"][0]["reasons"]["gpus"]

    h100 = booted_lab.python(specs[2], RUNNING)
    assert sorted(unit for unit in h100 if unit != "plan") == [
        "lingbot@numa0.service",
        "lingbot@numa1.service",
    ]
    assert h100["lingbot@numa1.service"]["numactl"] == "--cpunodebind=1 --membind=1"
    assert _argument(h100["lingbot@numa1.service"]["argv"], "--gpus") == "0,1,2,3"
    port = h100["plan"]["instances"][1]["port"]
    metrics = booted_lab.run(specs[2], f"curl -sf http://127.0.0.1:{port}/metrics").stdout
    assert 'lingbot_balancer_weight{gpu="gpu:3"}' in metrics

    again = run_playbook("site.yml", limit)
    assert again.rc == 0, again.stdout[-4000:]
    for spec in specs:
        assert recap(again, spec.name)["changed"] == 0, spec.name


def test_check_diff_and_bad_override_write_nothing(booted_lab):
    spec = booted_lab.node("a6000-phb")
    before = booted_lab.run(spec, TOOLKIT_FILES).stdout
    assert "/etc/lingbot/main/config.yaml" in before, "converge the node first"

    preview = run_playbook(
        "site.yml", spec.name, "--check", "--diff", "-e", "lingbot_service_p2p_min_gbytes_per_s=30"
    )
    assert preview.rc == 0, preview.stdout[-4000:]
    assert "+++ after: /etc/lingbot/main/config.yaml" in preview.stdout
    assert "-  p2p_threshold_gbps: 200.0" in preview.stdout
    assert "+  p2p_threshold_gbps: 240.0" in preview.stdout or "+p2p_threshold_gbps: 240.0" in (
        preview.stdout
    )
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == before

    bad = run_playbook(
        "site.yml",
        spec.name,
        "-e",
        json.dumps({"lingbot_service_config_overrides": {"colour": 1}}),
    )
    assert bad.rc != 0
    assert "colour" in bad.stdout
    assert booted_lab.run(spec, TOOLKIT_FILES).stdout == before


def test_monitor_timer_writes_metrics_a_prometheus_parser_reads(booted_lab):
    from prometheus_client.parser import text_string_to_metric_families

    spec = booted_lab.node("a6000-phb")
    timers = booted_lab.run(spec, "systemctl list-timers lingbot-fleet-monitor.timer --no-legend")
    assert "lingbot-fleet-monitor.timer" in timers.stdout
    started = booted_lab.run(spec, RUN_MONITOR_ONCE, check=False)
    assert started.returncode == 0, f"a monitor run failed; its journal:\n{started.stderr}"
    text = booted_lab.run(
        spec, "cat /var/lib/prometheus/node-exporter/lingbot_fleet_monitor.prom"
    ).stdout
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("lingbot_fleet_p2p_usable", (("dst", "1"), ("src", "0")))] == 1
    assert samples[("lingbot_fleet_fallback_recommended", (("instance", "main"),))] == 0
    pair = (("dst", "1"), ("src", "0"))
    bandwidth = samples[("lingbot_fleet_p2p_bandwidth_bytes_per_second", pair)]
    assert 27.0e9 < bandwidth < 30.0e9


MONITOR_FILES = (
    "md5sum /usr/local/sbin/lingbot-fleet-monitor /etc/lingbot-fleet/monitor.json "
    "/etc/systemd/system/lingbot-fleet-monitor.service "
    "/etc/systemd/system/lingbot-fleet-monitor.timer"
)


def test_a_converged_node_is_answered_from_one_reading_and_drift_is_still_put_back(booted_lab):
    """nvidia_persistence and topo_monitor cost no call of their own on a converged node
    (gpu_facts' check-mode reading, the monitor's receipt), and what drifts since is
    still found and put back by their modules."""
    spec = booted_lab.node("a6000-phb")
    before = booted_lab.run(spec, MONITOR_FILES).stdout
    converged = run_playbook("site.yml", spec.name)
    assert converged.rc == 0, converged.stdout[-4000:]
    assert recap(converged, spec.name)["changed"] == 0
    [persistence] = converged.results(spec.name, action="nvidia_persistence")
    assert persistence.result["verified"] is True
    assert "no module call" in persistence.result["notes"][-1]
    [monitor] = converged.results(spec.name, action="topo_monitor_install")
    assert monitor.result["receipt"] == "stands"

    # Drift: the monitor's configuration edited, its timer stopped, the daemon stopped.
    booted_lab.run(spec, "echo ' ' >> /etc/lingbot-fleet/monitor.json")
    booted_lab.run(spec, "systemctl stop lingbot-fleet-monitor.timer nvidia-persistenced")
    fixed = run_playbook("site.yml", spec.name)
    assert fixed.rc == 0, fixed.stdout[-4000:]
    [persistence] = fixed.results(spec.name, action="nvidia_persistence")
    assert "start nvidia-persistenced.service" in persistence.result["actions"]
    [monitor] = fixed.results(spec.name, action="topo_monitor_install")
    assert monitor.result["changed"] is True
    assert "start lingbot-fleet-monitor.timer" in monitor.result["actions"]
    # A call that changed something keeps no receipt (the converged run's is removed); the
    # next call, changing nothing, writes one.
    assert monitor.result["receipt"] == "removed"
    assert booted_lab.run(spec, MONITOR_FILES).stdout == before
    active = booted_lab.run(
        spec, "systemctl is-active lingbot-fleet-monitor.timer nvidia-persistenced"
    )
    assert active.stdout.split() == ["active", "active"]

    again = run_playbook("site.yml", spec.name)
    assert recap(again, spec.name)["changed"] == 0
    [monitor] = again.results(spec.name, action="topo_monitor_install")
    assert monitor.result["receipt"] == "written"
    answered = run_playbook("site.yml", spec.name)
    assert recap(answered, spec.name)["changed"] == 0
    [monitor] = answered.results(spec.name, action="topo_monitor_install")
    assert monitor.result["receipt"] == "stands"


MAIN_PID = "systemctl show -p MainPID --value lingbot@main.service"
WAIT_ACTIVE = (
    "for i in $(seq 450); do systemctl is-active -q lingbot@main.service && "
    '[ "$(systemctl show -p MainPID --value lingbot@main.service)" != {old} ] && exit 0; '
    "sleep 0.2; done; exit 1"
)


def remote_calls(run, host: str) -> list[str]:
    """The tasks of the run that called a module on the host: every task that ran, less
    the ones answered on the controller (a receipt that stands, a reading reused, the
    nvidia_persistence answer from gpu_facts' reading, the saved probe, link checks, the
    controller's own actions)."""
    controller = ("set_fact", "lingbot_policy_check", "gpu_link_check", "fail", "include_tasks")
    calls = []
    for task in run.results(host):
        result = task.result
        answered = (
            task.outcome == "skipped"
            or task.action.rsplit(".", 1)[-1] in controller
            or result.get("receipt") == "stands"
            or result.get("reused") is True
            or "no module call" in " ".join(result.get("notes") or [])
            or "reused the probe" in str(result.get("msg", ""))
            or "arg spec validation" in str(result.get("msg", ""))
        )
        if not answered:
            calls.append(task.task)
    return calls


def test_a_converged_node_costs_one_call_and_a_crashed_or_hung_lingbot_is_checked_again(
    booted_lab,
):
    """A converged node: one module call (gpu_facts), every other role answered from what
    it read. LingBot killed (systemd restarts it): its module runs and checks it ready.
    LingBot stopped with SIGSTOP (same process, no answer): gpu_facts' reading sees it, the
    module runs and the node fails with the journal, never answered from the receipt."""
    spec = booted_lab.node("a6000-phb")
    # Converge, then a run that changes nothing keeps the receipts the next one answers from.
    assert run_playbook("site.yml", spec.name).rc == 0
    assert run_playbook("site.yml", spec.name).rc == 0
    converged = run_playbook("site.yml", spec.name)
    assert converged.rc == 0, converged.stdout[-4000:]
    assert recap(converged, spec.name)["changed"] == 0
    assert remote_calls(converged, spec.name) == ["Gather the GPU facts in one call"]
    for action in ("kernel_cmdline", "lingbot_service", "topo_monitor_install"):
        [answered] = converged.results(spec.name, action=action)
        assert answered.result["receipt"] == "stands", action
    [service] = converged.results(spec.name, action="lingbot_service")
    assert service.result["readiness"]["main"]["ready"] is True

    # A crash: systemd starts a new process; the module checks it as it checks a start.
    old = booted_lab.run(spec, MAIN_PID).stdout.strip()
    booted_lab.run(spec, f"kill -KILL {old}")
    booted_lab.run(spec, WAIT_ACTIVE.format(old=old), timeout=120)
    crashed = run_playbook("site.yml", spec.name)
    assert crashed.rc == 0, crashed.stdout[-4000:]
    assert recap(crashed, spec.name)["changed"] == 0
    [service] = crashed.results(spec.name, action="lingbot_service")
    assert service.result["receipt"] == "written"
    assert "waited_s" in service.result["readiness"]["main"]
    assert service.result["readiness"]["main"]["main_pid"] != int(old)

    # A hang: the same process, active, listening, and not answering.
    pid = booted_lab.run(spec, MAIN_PID).stdout.strip()
    booted_lab.run(spec, f"kill -STOP {pid}")
    try:
        hung = run_playbook("site.yml", spec.name)
    finally:
        booted_lab.run(spec, f"kill -CONT {pid}")
    assert hung.rc != 0
    [failure] = hung.failed_tasks(spec.name)
    assert failure.action.endswith("lingbot_service")
    assert "lingbot@main.service is not ready on port" in failure.result["msg"]
    assert failure.result["journal"]
    again = run_playbook("site.yml", spec.name)
    assert again.rc == 0, again.stdout[-4000:]
    [service] = again.results(spec.name, action="lingbot_service")
    assert service.result["receipt"] == "written"
    assert service.result["readiness"]["main"]["main_pid"] == int(pid)


# Restart one instance as an operator (or a reboot) would, then time what its first
# clients see: ten 128-word chat completions, one after another.
FIRST_REQUESTS = r"""
import json, subprocess, time, urllib.request
port = json.load(open("/etc/lingbot/plan.json"))["instances"][0]["port"]
subprocess.run(["systemctl", "restart", "lingbot@main.service"], check=True)
deadline = time.monotonic() + 60
while True:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        break
    except OSError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.1)
body = json.dumps({"messages": [{"role": "user", "content": " ".join(["word"] * 128)}]}).encode()
times = []
for _ in range(10):
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    urllib.request.urlopen(request, timeout=30).read()
    times.append(time.monotonic() - started)
journal = subprocess.run(["journalctl", "-u", "lingbot@main.service", "-n", "40", "--no-pager",
                          "-o", "cat"], capture_output=True, text=True).stdout
print(json.dumps({"times_s": times, "journal": journal, "port": port}))
"""
# The lab driver's first-use costs with persistence on (lab/CONTRACT.md): two contexts of
# 150 ms and two peer mappings of 40 ms; a first request carrying them is this much slower.
COLD_FIRST_REQUEST_EXTRA_S = 0.3
# What a loaded two-core machine may add to one request over another.
REQUEST_JITTER_S = 0.05


def test_warm_up_takes_the_first_use_costs_off_the_first_request(booted_lab):
    spec = booted_lab.node("a6000-phb")
    warm = booted_lab.python(spec, FIRST_REQUESTS)
    first_s, tenth_s = warm["times_s"][0], warm["times_s"][9]
    assert first_s <= tenth_s + REQUEST_JITTER_S, warm["times_s"]
    assert "lingbot-fleet warm-up: peer pair 0->1: peer access on" in warm["journal"]
    ready_line = f"lingbot-fleet warm-up: 127.0.0.1:{warm['port']} ready: one-token chat"
    assert ready_line in warm["journal"]

    try:
        off = run_playbook("site.yml", spec.name, "-e", "lingbot_service_warm_up=false")
        assert off.rc == 0, off.stdout[-4000:]
        assert recap(off, spec.name)["changed"] > 0
        cold = booted_lab.python(spec, FIRST_REQUESTS)
        first_s, tenth_s = cold["times_s"][0], cold["times_s"][9]
        assert first_s >= tenth_s + COLD_FIRST_REQUEST_EXTRA_S, cold["times_s"]
        assert "lingbot-fleet warm-up" not in cold["journal"].split("LingBot 0.4.2 starting")[-1]
    finally:
        back = run_playbook("site.yml", spec.name)
    assert back.rc == 0, back.stdout[-4000:]
    again = run_playbook("site.yml", spec.name)
    assert recap(again, spec.name)["changed"] == 0


# Each instance's MainPID and whether a chat completion answers 200.
SERVING = r"""
import json, subprocess, urllib.request
plan = json.load(open("/etc/lingbot/plan.json"))
out = {}
for instance in plan["instances"]:
    unit = f"lingbot@{instance['name']}.service"
    pid = subprocess.run(["systemctl", "show", "-p", "MainPID", "--value", unit],
                         capture_output=True, text=True).stdout.strip()
    body = json.dumps({"messages": [{"role": "user", "content": "hello"}]}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{instance['port']}/v1/chat/completions", data=body,
        headers={"Content-Type": "application/json"})
    try:
        status = urllib.request.urlopen(request, timeout=30).status
    except OSError as error:
        status = str(error)
    out[instance["name"]] = {"pid": pid, "chat": status, "gpus": instance["gpus"]}
print(json.dumps(out))
"""
MONITOR_REPORT = "cat /var/lib/lingbot-fleet/monitor/last-run.json"


def chat_statuses(serving: dict) -> dict:
    return {name: entry["chat"] for name, entry in serving.items()}


def test_a_gpu_falling_off_the_bus_while_lingbot_serves_is_named_and_the_rest_serves(
    booted_lab, tmp_path
):
    """Fault test: a GPU falls off the bus (Xid 79) under a running LingBot. The next
    monitor run and the audit name it (GPU, bus id, Xid); the instance on the other GPUs
    keeps serving, untouched; nothing the toolkit wrote changes."""
    spec = booted_lab.node("h100-sxm-nvswitch")
    if booted_lab.run(spec, "test -e /etc/lingbot/plan.json", check=False).returncode != 0:
        assert run_playbook("site.yml", spec.name).rc == 0
    before = booted_lab.python(spec, SERVING)
    before_statuses = {"numa0": 200, "numa1": 200}
    assert chat_statuses(before) == before_statuses
    files = booted_lab.run(spec, TOOLKIT_FILES).stdout
    lost_gpu = before["numa1"]["gpus"][0]
    try:
        booted_lab.run(spec, f"/opt/lingbot-lab/bin/lingbot-lab-incident gpu-lost --gpu {lost_gpu}")
        started = booted_lab.run(spec, RUN_MONITOR_ONCE, check=False)
        assert started.returncode == 0, f"the monitor run failed:\n{started.stderr}"
        report = json.loads(booted_lab.run(spec, MONITOR_REPORT).stdout)
        by_code = {f["code"]: f for f in report["findings"]}
        assert "KERNEL_LOG_UNREADABLE" not in by_code, by_code["KERNEL_LOG_UNREADABLE"]
        lost, xid = by_code["GPU_LOST"], by_code["GPU_XID_79"]
        assert (lost["severity"], xid["severity"]) == ("critical", "critical")
        assert xid["subject"] == lost["subject"]
        assert xid["evidence"]["index"] == lost_gpu
        assert "GPU has fallen off the bus" in xid["message"]

        audit = run_audit(spec, tmp_path)
        assert audit.returncode == 1, audit.stdout + audit.stderr
        node = audited_node(tmp_path)
        assert node["status"] == "findings"
        [audited] = [f for f in node["findings"] if f["code"] == "GPU_XID_79"]
        assert (audited["severity"], audited["subject"]) == ("critical", xid["subject"])
        assert audited["evidence"]["index"] == lost_gpu

        after = booted_lab.python(spec, SERVING)
        assert after["numa0"] == before["numa0"], "the other instance was disturbed"
        assert booted_lab.run(spec, TOOLKIT_FILES).stdout == files
    finally:
        booted_lab.reboot(spec)
    # The incident lasts until the next boot: both instances serve again.
    deadline = time.monotonic() + 60
    while chat_statuses(serving := booted_lab.python(spec, SERVING)) != before_statuses:
        assert time.monotonic() < deadline, serving
        time.sleep(1)
