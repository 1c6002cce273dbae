"""Every unit the toolkit writes, judged by the real `systemd-analyze security --offline=yes`.

Rendered by the code the modules run into a temp root. The toolkit's own units must stay at
an exposure of 2.0 or less (systemd's "OK" band): the ACS unit here, LingBot's instance
unit and the monitor's service also in tests/service/test_unit_exposure.py (the monitor's
timer runs the service and has no exposure of its own). nvidia-persistenced's unit is the
driver package's: the toolkit's drop-in only resets ExecStart, so it must not add exposure.
"""

from __future__ import annotations

from pathlib import Path

from unit_exposure_support import MAX_EXPOSURE, exposure, needs_analyze

from lingbot_fleet.gpu import acs, persistence
from lingbot_fleet.monitor.units import MonitorUnits, unit_files

REPO = Path(__file__).resolve().parents[2]
pytestmark = needs_analyze


def unit_dir(root: Path) -> Path:
    directory = root / "etc/systemd/system"
    directory.mkdir(parents=True, exist_ok=True)
    return directory


def test_the_acs_unit_is_sandboxed_to_what_setpci_needs(tmp_path: Path) -> None:
    ports = [acs.ManagedPort("0000:18:00.0", 0x000C), acs.ManagedPort("0000:18:01.0", 0x0004)]
    text = acs.unit_text(ports, "/usr/bin/setpci")
    (unit_dir(tmp_path) / acs.UNIT_NAME).write_text(text)
    assert "CapabilityBoundingSet=CAP_SYS_ADMIN\n" in text
    assert "PrivateNetwork=yes\n" in text
    # The unsandboxed unit this replaced was rated 9.6 (UNSAFE).
    assert exposure(tmp_path, acs.UNIT_NAME) <= MAX_EXPOSURE


def test_the_acs_unit_without_its_sandbox_would_fail_this_check(tmp_path: Path) -> None:
    """The measure can fail: the same unit without the sandbox lines is rated unsafe."""
    text = acs.unit_text([acs.ManagedPort("0000:18:00.0", 0x000C)], "/usr/bin/setpci")
    bare = "\n".join(line for line in text.splitlines() if line not in acs.UNIT_SANDBOX)
    (unit_dir(tmp_path) / acs.UNIT_NAME).write_text(bare + "\n")
    assert exposure(tmp_path, acs.UNIT_NAME) > MAX_EXPOSURE


def test_the_monitor_service_is_sandboxed(tmp_path: Path) -> None:
    units = MonitorUnits(
        python="/usr/bin/python3",
        app_path="/usr/local/sbin/lingbot-fleet-monitor",
        config_path="/etc/lingbot-fleet/monitor.json",
        state_dir="/var/lib/lingbot-fleet/monitor",
        textfile_dir="/var/lib/prometheus/node-exporter",
    )
    files = unit_files(units)
    for name, text in files.items():
        (unit_dir(tmp_path) / name).write_text(text)
    services = [name for name in files if name.endswith(".service")]
    assert services
    for name in services:
        assert exposure(tmp_path, name) <= MAX_EXPOSURE, name


def test_the_persistenced_dropin_adds_no_exposure(tmp_path: Path) -> None:
    """The driver's unit (the lab installs the package's unit) is rated as it is; with the
    toolkit's drop-in it is rated the same."""
    vendor = (REPO / "lab/node/systemd/nvidia-persistenced.service").read_text()
    vendor = vendor.replace("@PERSISTENCED_ARGS@", persistence.NO_PERSISTENCE_FLAG)
    (unit_dir(tmp_path) / "nvidia-persistenced.service").write_text(vendor)
    without = exposure(tmp_path, "nvidia-persistenced.service")
    dropin_dir = unit_dir(tmp_path) / "nvidia-persistenced.service.d"
    dropin_dir.mkdir()
    (dropin_dir / persistence.DROPIN_NAME).write_text(
        persistence.dropin_text(
            "/etc/systemd/system/nvidia-persistenced.service",
            "/usr/bin/nvidia-persistenced --user nvidia-persistenced --verbose",
        )
    )
    assert exposure(tmp_path, "nvidia-persistenced.service") == without
