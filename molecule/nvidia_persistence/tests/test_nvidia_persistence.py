"""Persistence mode is on for every GPU, through the daemon's own arguments (a drop-in),
so it survives a restart of the daemon; the vendor unit is untouched."""

from __future__ import annotations

DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/lingbot-fleet.conf"
VENDOR_UNIT = "/lib/systemd/system/nvidia-persistenced.service"


def persistence_modes(host) -> list[str]:
    return host.check_output(
        "nvidia-smi --query-gpu=persistence_mode --format=csv,noheader"
    ).split()


def test_persistence_mode_is_on_for_every_gpu(host):
    modes = persistence_modes(host)
    assert modes and set(modes) == {"Enabled"}, modes


def test_the_daemon_is_enabled_and_runs_without_no_persistence_mode(host):
    daemon = host.service("nvidia-persistenced")
    assert daemon.is_enabled
    assert daemon.is_running
    exec_start = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced")
    assert "nvidia-persistenced" in exec_start
    assert "--no-persistence-mode" not in exec_start


def test_the_fix_is_a_dropin_and_the_vendor_unit_keeps_its_flag(host):
    assert "--no-persistence-mode" in host.file(VENDOR_UNIT).content_string
    dropin = host.file(DROPIN)
    assert dropin.exists
    assert dropin.content_string.count("ExecStart=") == 2  # the reset, then the fixed one
    verify = host.run("systemd-analyze verify nvidia-persistenced.service")
    assert verify.rc == 0, verify.stderr


def test_persistence_mode_comes_back_when_the_daemon_restarts(host):
    host.run_test("systemctl restart nvidia-persistenced")
    modes = persistence_modes(host)
    assert modes and set(modes) == {"Enabled"}, modes
