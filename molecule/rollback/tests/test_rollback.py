"""After site.yml and one rollback.yml to generation 0, the node is as before: the md5 of
every file the toolkit may change and the running kernel command line equal prepare's
listing, and the generations say what happened (the provision recorded once, the rollback
recorded as its own generation)."""

from __future__ import annotations

import json

GENERATIONS = "/var/lib/lingbot-fleet/generations"


def manifests(host) -> dict[int, dict]:
    names = host.file(GENERATIONS).listdir()
    return {
        int(name): json.loads(host.file(f"{GENERATIONS}/{name}/manifest.json").content_string)
        for name in names
        if name.isdigit()
    }


def test_every_toolkit_file_is_back_byte_for_byte(host):
    pristine = host.file("/root/pristine.md5").content_string
    assert "/etc/default/grub" in pristine
    assert "pci=noacpi" in host.file("/proc/cmdline").content_string
    now = host.check_output("/root/toolkit-files.sh")
    assert now.strip() == pristine.strip()


def test_the_provision_changed_the_node_and_was_recorded_once(host):
    found = manifests(host)
    assert sorted(found) == [1, 2], "provision, its idempotent rerun recording nothing, rollback"
    provision = found[1]
    assert provision["complete"] is True
    recorded = {entry["path"] for entry in provision["files"]}
    assert "/etc/default/grub.d/lingbot-fleet.cfg" in recorded
    assert "/etc/lingbot/plan.json" in recorded


def test_the_rollback_is_its_own_generation(host):
    ran = manifests(host)[2]["ran"]
    assert ran["rollback"] is True
    assert ran["rollback_to"] == 0
    assert ran["undone"] == [1]
    assert not host.file(f"{GENERATIONS}/pending").listdir()


def test_no_lingbot_instance_is_left(host):
    units = host.check_output("systemctl list-units --all --no-legend 'lingbot@*'")
    assert not units.strip(), units
    # The directories the provision created went with their files.
    assert not host.file("/etc/lingbot").exists
    assert not host.file("/etc/lingbot-fleet").exists
    assert not host.check_output(
        "find /etc/systemd/system -name 'lingbot@*' -o -name 'lingbot-fleet*'"
    )


def test_the_gone_monitor_leaves_no_metrics_to_export(host):
    """side_effect ran the monitor once before the rollback: its metrics went with it."""
    assert not host.file("/var/lib/prometheus/node-exporter/lingbot_fleet_monitor.prom").exists
