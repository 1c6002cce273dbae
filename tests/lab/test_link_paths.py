"""The whole PCIe path of each GPU is judged on a lab node: a switch uplink trained at x8
of x16 halves the host bandwidth of both GPUs behind it, whose own links are healthy."""

from __future__ import annotations

from lab_support import run_playbook

PROFILE = "pcie-switch-narrow-uplink"
UPLINK = "0000:41:00.0"  # the switch's upstream port; its link partner is root port 40:01.1
GPUS = ("0000:43:00.0", "0000:44:00.0")


def rollback_to_zero(spec) -> None:
    done = run_playbook(
        "playbooks/rollback.yml", spec.name, "-e", "rollback_confirm=true", "-e", "rollback_to=0"
    )
    assert done.rc == 0, done.stdout[-4000:]


def test_a_narrow_switch_uplink_is_named_and_its_halved_bandwidth_found(booted_lab):
    spec = booted_lab.node(PROFILE)
    try:
        # A fresh probe: its H2D/D2H figures are judged against the path's floor.
        done = run_playbook("site.yml", spec.name, "-e", "p2p_probe_max_age_s=0")
        assert done.rc == 0, done.stdout[-4000:]
        [checks] = done.results(spec.name, action="gpu_link_check")
        findings = checks.result["findings"]
        assert [(f["code"], f["severity"], f["subject"]) for f in findings] == [
            ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "error", GPUS[0]),
            ("PCIE_HOST_BANDWIDTH_BELOW_FLOOR", "error", GPUS[1]),
            ("PCIE_LINK_TRAINED_BELOW_CAPABILITY", "error", UPLINK),
        ]
        uplink = findings[2]
        assert uplink["message"] == (
            f"The link switch upstream {UPLINK} - root port 0000:40:01.1 trained at x8 "
            f"although both ends can do x16 (below it: {GPUS[0]}, {GPUS[1]})"
        )
        assert uplink["evidence"]["link"]["current_width"] == 8
        assert uplink["evidence"]["link"]["max_width"] == 16
        for finding in findings[:2]:
            evidence = finding["evidence"]
            assert evidence["floor_gbytes_per_s"] == 23.6
            assert (evidence["path_max_gen"], evidence["path_max_width"]) == (4, 16)
            # The lab's copies cross the x8 uplink: about half of 24.9 / 26.3 GB/s.
            assert 11.5 < evidence["h2d_gbytes_per_s"] < 12.7
            assert 12.2 < evidence["d2h_gbytes_per_s"] < 13.5
            assert evidence["narrowest_link"]["device"] == UPLINK
            assert evidence["source"].startswith("probe of ")
            assert finding["fix"].startswith(
                f"bring the link switch upstream {UPLINK} - root port 0000:40:01.1 back to x16"
            )
        # Each GPU's own link is Gen4 x16 and passes every per-GPU check.
        readings = done.results(spec.name, action="gpu_facts")
        facts = [r for r in readings if "ansible_facts" in r.result][-1]
        gpus = facts.result["ansible_facts"]["lingbot_gpu"]["gpus"]
        assert [(g["pcie"]["current_width"], g["pcie"]["max_gen"]) for g in gpus] == [(16, 4)] * 2
    finally:
        rollback_to_zero(spec)
