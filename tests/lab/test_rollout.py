"""Issue bar for the gated rollout: a canary that fails its gate stops the rollout and is
back at its previous generation (files identical by checksum, service healthy)."""

from __future__ import annotations

import json

from lab_support import run_playbook

HEALTHY = ("a6000-idle-gen1", "a6000-persistenced-off", "a6000-phb", "pcie-4gpu-two-switches")
TOOLKIT_FILES = (
    "find /etc/default/grub /etc/default/grub.d /etc/lingbot /etc/systemd/system "
    "-type f 2>/dev/null | sort | xargs -r md5sum"
)
DEGRADE_PAIR = (
    "python3 -c \"import json; p='/opt/lingbot-lab/profile.json'; d=json.load(open(p)); "
    "d['paths'][0]['p2p']['gbytes_per_s'] = 9.0; json.dump(d, open(p, 'w'))\""
)


def test_failing_canary_stops_the_rollout_and_is_rolled_back(booted_lab):
    specs = [booted_lab.node(profile) for profile in HEALTHY]
    limit = ",".join(spec.name for spec in specs)
    converge = run_playbook("site.yml", limit)
    assert converge.rc == 0, converge.stdout[-4000:]
    before = {spec.name: booted_lab.run(spec, TOOLKIT_FILES).stdout for spec in specs}
    canary = specs[0]
    booted_lab.run(canary, DEGRADE_PAIR)
    booted_lab.reboot(canary)

    change = {"lingbot_service_config_overrides": {"kv_cache_sync_interval_ms": 20}}
    rollout = run_playbook("playbooks/rollout.yml", limit, "-e", json.dumps(change))

    assert rollout.rc != 0, rollout.stdout[-4000:]
    assert canary.name in rollout.stdout
    assert "probe_paths" in rollout.stdout
    assert "not reached" in rollout.stdout
    for spec in specs:
        after = booted_lab.run(spec, TOOLKIT_FILES).stdout
        assert after == before[spec.name], f"{spec.name} is not back to its previous files"
    health = booted_lab.run(canary, "systemctl is-active lingbot@main.service").stdout.strip()
    assert health == "active"
    config = booted_lab.run(canary, "cat /etc/lingbot/main/config.yaml").stdout
    assert "kv_cache_sync_interval_ms: 20" not in config


LINGBOT_PIDS = "systemctl show -p MainPID --value 'lingbot@*.service' | sort"


def test_a_change_that_takes_peer_access_away_fails_the_latency_gate(booted_lab):
    """Raising the P2P bar above what the canary's PHB pair measures plans its GPUs apart:
    every infrastructure gate passes (no pair used, links and probe unchanged), but each
    request now runs on one GPU and takes longer than before the change. The service_load
    gate sees it, the canary goes back to its previous generation, no other node is
    touched. The canary comes first in inventory order, so it is the first batch."""
    specs = [
        booted_lab.node(profile) for profile in ("a6000-phb", "a6000-x8", "pcie-4gpu-two-switches")
    ]
    limit = ",".join(spec.name for spec in specs)
    converge = run_playbook("site.yml", limit)
    assert converge.rc == 0, converge.stdout[-4000:]
    before = {spec.name: booted_lab.run(spec, TOOLKIT_FILES).stdout for spec in specs}
    pids = {spec.name: booted_lab.run(spec, LINGBOT_PIDS).stdout for spec in specs}
    canary, others = specs[0], specs[1:]

    # 32 GB/s: above what the PHB pair measures (28.4 GB/s).
    change = {"lingbot_service_p2p_min_gbytes_per_s": 32}
    rollout = run_playbook("playbooks/rollout.yml", limit, "-e", json.dumps(change))

    assert rollout.rc != 0, rollout.stdout[-4000:]
    [gate] = rollout.results(canary.name, action="rollout_gate")
    report = gate.result["gate"]
    assert report["gates"]["service_load"] == "failed", report
    assert {failure["gate"] for failure in report["failures"]} == {"service_load"}, report
    assert "P95 latency" in report["failures"][0]["evidence"]
    for passed in ("lingbot_health", "link_check", "probe_paths"):
        assert report["gates"][passed] == "passed", report
    assert "not reached" in rollout.stdout
    for spec in specs:
        after = booted_lab.run(spec, TOOLKIT_FILES).stdout
        assert after == before[spec.name], f"{spec.name} is not back to its previous files"
    for spec in others:
        assert booted_lab.run(spec, LINGBOT_PIDS).stdout == pids[spec.name], spec.name
    units = booted_lab.run(canary, "systemctl is-active lingbot@main.service").stdout.strip()
    assert units == "active"
