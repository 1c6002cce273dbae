"""ACS redirect off on the switch ports the operator names: decided here, applied at boot.

Stdlib-only: runs on nodes (the pcie_acs role's module).

ACS (Access Control Services) request and completion redirect on a PCIe switch's
downstream port send every peer request of the device below it up to the root complex,
so two GPUs behind one switch talk through the CPU instead of across the switch (slower;
with a translating IOMMU, each request is also translated). It is a PCIe register, not a
kernel parameter: the firmware or the kernel sets it at every boot. The toolkit reports
it (``linkcheck.acs_redirect_findings``) and, when the operator names the ports in
``pcie_acs_redirect_off_bridges``, turns it off through one systemd unit that runs at
every boot (``UNIT_NAME``) and sets the bits back when it is stopped (a rollback stops it).

What is refused, with the reason:

- a port that is not a switch downstream port above one of this node's GPUs (a root port
  or a chipset port guards whatever sits below it; its ACS stays);
- a port without a readable ACS capability;
- any of it while the IOMMU translates (ACS then keeps the devices' DMA isolated from
  each other, which is what a translating IOMMU is for), unless the operator says so
  (``allow_translating_iommu``). Then the unit is not installed, or is taken away.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..node.nodefiles import run_command
from ..node.systemd import parse_properties

SETPCI_VARIABLE = "pcie_acs_setpci"
UNIT_NAME = "lingbot-fleet-acs-redirect-off.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
# ACS control register (at +6 of the ACS extended capability): bit 2 request redirect,
# bit 3 completion redirect. setpci's value:mask form changes only these bits.
REDIRECT_MASK = 0x000C
ACS_CONTROL_REGISTER = "ECAP_ACS+6.w"
_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_EXEC_STOP = re.compile(
    r"^ExecStop=\S+ -s (?P<bdf>\S+) "
    + re.escape(ACS_CONTROL_REGISTER)
    + r"=(?P<value>[0-9a-f]{4}):(?P<mask>[0-9a-f]{4})$"
)
TRANSLATING_IOMMU_MODES = ("translated", "mixed", "unknown")


# The pcie_acs module's options (its DOCUMENTATION describes them).
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "redirect_off_bridges": {"type": "list", "elements": "str", "default": []},
    "allow_translating_iommu": {"type": "bool", "default": False},
    "facts": {"type": "dict", "required": True},
    "setpci": {"type": "str", "default": "setpci"},
    "verify": {"type": "bool", "default": True},
    "root": {"type": "path", "default": "/"},
}


class AcsError(Exception):
    """A named port the toolkit will not touch; str() names it and the fix."""


@dataclass(frozen=True)
class ManagedPort:
    """A port the unit turns redirect off on, and the redirect bits it had before."""

    bdf: str
    redirect_bits_before: int


@dataclass(frozen=True)
class AcsDecision:
    ports: tuple[ManagedPort, ...]  # empty: no unit
    # Named ports left alone, each with why (redirect already off, not by this unit).
    left_alone: tuple[tuple[str, str], ...] = ()
    refused: str | None = None  # why nothing is applied (the IOMMU translates)

    def to_json(self) -> dict[str, Any]:
        return {
            "ports": [
                {"bdf": port.bdf, "redirect_bits_before": f"0x{port.redirect_bits_before:04x}"}
                for port in self.ports
            ],
            "left_alone": [{"bdf": bdf, "why": why} for bdf, why in self.left_alone],
            "refused": self.refused,
        }


def normalize_bdf(text: str) -> str:
    """'18:00.0' or '0000:18:00.0' (any case) as '0000:18:00.0'; AcsError otherwise."""
    bdf = str(text).strip().lower()
    if bdf.count(":") == 1:
        bdf = f"0000:{bdf}"
    if not _BDF.match(bdf):
        raise AcsError(
            f"pcie_acs_redirect_off_bridges: {text!r} is not a PCI address; write it as "
            "lspci -D prints it, e.g. 0000:18:00.0"
        )
    return bdf


def switch_ports_above_gpus(facts: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """bdf -> the bridge's facts plus the GPU indexes below it, for every bridge above a
    GPU the driver has not lost."""
    ports: dict[str, dict[str, Any]] = {}
    for gpu in facts.get("gpus") or []:
        if gpu.get("lost"):
            continue
        for bridge in gpu.get("bridges") or []:
            entry = ports.setdefault(str(bridge.get("bdf")), {**bridge, "gpus": []})
            entry["gpus"].append(gpu.get("index"))
    return ports


def installed_ports(unit_text: str | None) -> dict[str, int]:
    """bdf -> redirect bits before, as the installed unit records them (its ExecStop)."""
    found: dict[str, int] = {}
    for line in (unit_text or "").splitlines():
        match = _EXEC_STOP.match(line.strip())
        if match and int(match["mask"], 16) == REDIRECT_MASK:
            found[match["bdf"]] = int(match["value"], 16) & REDIRECT_MASK
    return found


def decide(
    named: Sequence[str],
    facts: Mapping[str, Any],
    *,
    allow_translating_iommu: bool,
    installed_unit: str | None,
) -> AcsDecision:
    """The ports the unit must manage; AcsError for a port the toolkit will not touch."""
    wanted = list(dict.fromkeys(normalize_bdf(bdf) for bdf in named))
    ports = switch_ports_above_gpus(facts)
    switch_ports = sorted(bdf for bdf, port in ports.items() if _is_switch_downstream(port))
    for bdf in wanted:
        port = ports.get(bdf)
        if port is None:
            raise AcsError(
                f"pcie_acs_redirect_off_bridges: {bdf} is not a bridge above any GPU of this "
                f"node; the switch downstream ports above its GPUs are: "
                f"{', '.join(switch_ports) or 'none'}"
            )
        if not _is_switch_downstream(port):
            raise AcsError(
                f"pcie_acs_redirect_off_bridges: {bdf} is a {port.get('port_type') or 'bridge'}"
                ", not a switch downstream port; ACS on root and chipset ports keeps the "
                "devices below them apart and is left as it is. Name the switch downstream "
                f"ports instead: {', '.join(switch_ports) or 'none'}"
            )
        if port.get("acs_status") != "read" or not isinstance(port.get("acs"), Mapping):
            raise AcsError(
                f"pcie_acs_redirect_off_bridges: {bdf} has no readable ACS capability "
                f"({port.get('acs_status') or 'unknown'}); nothing to turn off there"
            )
    mode = str((facts.get("iommu") or {}).get("mode") or "unknown")
    if wanted and mode in TRANSLATING_IOMMU_MODES and not allow_translating_iommu:
        return AcsDecision(
            (),
            refused=(
                f"the IOMMU is {mode} on this node: ACS then keeps the devices' DMA apart, "
                "so redirect stays on; boot with iommu=pt (kernel_cmdline) first, or set "
                "pcie_acs_allow_translating_iommu=true to turn it off anyway"
            ),
        )
    before = installed_ports(installed_unit)
    managed: list[ManagedPort] = []
    left_alone: list[tuple[str, str]] = []
    for bdf in wanted:
        bits_now = _redirect_bits(ports[bdf]["acs"])
        if bdf in before:
            managed.append(ManagedPort(bdf, before[bdf]))
        elif bits_now:
            managed.append(ManagedPort(bdf, bits_now))
        else:
            left_alone.append((bdf, "ACS redirect is already off (BIOS or another tool)"))
    return AcsDecision(tuple(managed), tuple(left_alone))


def _is_switch_downstream(port: Mapping[str, Any]) -> bool:
    return port.get("port_type") == "switch_downstream"


def _redirect_bits(acs: Mapping[str, Any]) -> int:
    bits = 0
    if acs.get("request_redirect"):
        bits |= 1 << 2
    if acs.get("completion_redirect"):
        bits |= 1 << 3
    return bits


# setpci needs PCI config space past its first 64 bytes (CAP_SYS_ADMIN) and to write the
# config files under /sys/bus/pci/devices (root owns them, so no CAP_DAC_OVERRIDE); nothing
# else. ProtectSystem=full rather than strict and no ProtectKernelTunables: both would make
# the config files read-only (the lab's PCI tree also lives under /run). `systemd-analyze
# security` rates it 1.2 (OK); tests/acs check it stays at 2.0 or less.
UNIT_SANDBOX = (
    "# Sandbox: only what setpci needs to write PCI config space (CAP_SYS_ADMIN, /sys).",
    "CapabilityBoundingSet=CAP_SYS_ADMIN",
    "AmbientCapabilities=",
    "NoNewPrivileges=yes",
    "ProtectSystem=full",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "PrivateDevices=yes",
    "DevicePolicy=closed",
    "PrivateNetwork=yes",
    "IPAddressDeny=any",
    "RestrictAddressFamilies=none",
    "PrivateMounts=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "RestrictSUIDSGID=yes",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "MemoryDenyWriteExecute=yes",
    "KeyringMode=private",
    "UMask=0077",
    "SystemCallArchitectures=native",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged @resources",
    "SystemCallErrorNumber=EPERM",
)


def unit_text(ports: Sequence[ManagedPort], setpci: str) -> str:
    """The boot-time unit: redirect off on each port at start, back as it was at stop."""
    names = " ".join(port.bdf for port in ports)
    lines = [
        "# Managed by lingbot-fleet (role pcie_acs); a rollback removes it.",
        "[Unit]",
        f"Description=ACS redirect off on PCIe switch ports {names} (GPU peer traffic "
        "across the switch)",
        "Before=nvidia-persistenced.service",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
    ]
    mask = f"{REDIRECT_MASK:04x}"
    lines += [f"ExecStart={setpci} -s {p.bdf} {ACS_CONTROL_REGISTER}=0000:{mask}" for p in ports]
    lines += [
        f"ExecStop={setpci} -s {p.bdf} {ACS_CONTROL_REGISTER}={p.redirect_bits_before:04x}:{mask}"
        for p in ports
    ]
    lines += UNIT_SANDBOX
    lines += ["", "[Install]", "WantedBy=multi-user.target", ""]
    return "\n".join(lines)


# ---- the receipt: a converged node costs no module call ------------------------------

RECEIPT_ROLE = "pcie_acs"


def facts_view(params: Mapping[str, Any]) -> dict[str, Any]:
    """What the module decides from in its ``facts`` option, which carries readings of the
    node (link speeds move with load): the digest of its receipt covers this view, so only
    an ACS bit, a port's place or the IOMMU mode moving takes the receipt down
    (``lingbot_fleet.controller.receipt_action.digest_options``)."""
    facts = params.get("facts") or {}
    ports = {
        bdf: {
            "switch_downstream": _is_switch_downstream(port),
            "acs_status": port.get("acs_status"),
            "redirect_bits": _redirect_bits(port.get("acs") or {}),
            "gpus": port["gpus"],
        }
        for bdf, port in switch_ports_above_gpus(facts).items()
    }
    return {"ports": ports, "iommu_mode": str((facts.get("iommu") or {}).get("mode") or "unknown")}


# The options that carry node readings, each entering the receipt's digest as its view.
DIGEST_VIEWS = {"facts": facts_view}


# ---- applying the decision on the node ------------------------------------------------

UNIT_STATE_PROPERTIES = ("LoadState", "UnitFileState", "ActiveState")


def unit_state(systemctl: str) -> dict[str, str]:
    """LoadState, UnitFileState and ActiveState of the unit (read only)."""
    argv = [systemctl, "show", *(f"--property={name}" for name in UNIT_STATE_PROPERTIES)]
    done = run_command([*argv, "--", UNIT_NAME], check=False)
    return parse_properties(done.stdout)


def apply(
    changes: Any,
    decision: AcsDecision,
    facts: Mapping[str, Any],
    *,
    setpci: str,
    systemctl: str,
    verify_unit: Any,
) -> dict[str, Any]:
    """Bring the unit in line with the decision through ``changes`` (NodeChanges).

    A unit whose ports change is stopped first (its ExecStop sets the bits back as they
    were), then written and started again; a unit the decision no longer wants is stopped,
    disabled and removed. A unit in line but not running, or whose ports show redirect on
    again (the bits come back at every boot, or someone set them), is started (restarted).
    ``verify_unit(text)`` raises AcsError when systemd refuses the unit.
    Returns {"unit_changed", "started", "ports_written"}: the ports whose ACS the unit's
    ExecStart or ExecStop lines wrote (the facts of those are stale).
    """
    current = changes.read(UNIT_PATH)
    changes.watch_unit(UNIT_NAME)
    state = unit_state(systemctl) if current is not None else {}
    active = state.get("ActiveState") == "active"
    installed = set(installed_ports(current.decode("utf-8", "replace") if current else None))
    written: set[str] = set()  # the ports an ExecStart or ExecStop line wrote
    if not decision.ports:
        if current is None:
            return {"unit_changed": False, "started": False, "ports_written": []}
        if active:
            changes.run([systemctl, "stop", UNIT_NAME], f"stop {UNIT_NAME} (ACS redirect back on)")
            written |= installed
        if state.get("UnitFileState") == "enabled":
            changes.run([systemctl, "disable", UNIT_NAME], f"disable {UNIT_NAME}")
        changes.remove_file(UNIT_PATH)
        changes.run([systemctl, "daemon-reload"], "reload the systemd units")
        return {"unit_changed": True, "started": False, "ports_written": sorted(written)}
    wanted = unit_text(decision.ports, setpci)
    ports = switch_ports_above_gpus(facts)
    redirect_on = [p.bdf for p in decision.ports if _redirect_bits(ports[p.bdf].get("acs") or {})]
    unit_changed = current != wanted.encode("utf-8")
    if unit_changed:
        verify_unit(wanted)
        if active:
            changes.run(
                [systemctl, "stop", UNIT_NAME], f"stop {UNIT_NAME} (its ports change: bits back)"
            )
            written |= installed
            active = False
        changes.write_file(UNIT_PATH, wanted, mode=0o644)
        changes.run([systemctl, "daemon-reload"], "reload the systemd units")
    if state.get("UnitFileState") != "enabled":
        changes.enable_unit(systemctl, UNIT_NAME)
    started = False
    if not active:
        changes.run([systemctl, "start", UNIT_NAME], f"start {UNIT_NAME} (ACS redirect off)")
        started = True
        written |= {port.bdf for port in decision.ports}
    elif redirect_on:
        changes.run(
            [systemctl, "restart", UNIT_NAME],
            f"restart {UNIT_NAME}: ACS redirect is on again on {', '.join(redirect_on)}",
        )
        started = True
        written |= installed | {port.bdf for port in decision.ports}
    return {"unit_changed": unit_changed, "started": started, "ports_written": sorted(written)}


def refreshed_facts(
    facts: Mapping[str, Any], read_bridge: Any, bdfs: Sequence[str]
) -> dict[str, Any]:
    """The facts with the named bridges read again (``read_bridge(bdf)`` -> bridge facts),
    so later roles (the probe, the checks) see the ACS now in effect."""
    fresh = {bdf: read_bridge(bdf) for bdf in bdfs}
    gpus = []
    for gpu in facts.get("gpus") or []:
        bridges = [
            {**bridge, **fresh[bridge.get("bdf")]} if bridge.get("bdf") in fresh else bridge
            for bridge in gpu.get("bridges") or []
        ]
        gpus.append({**gpu, "bridges": bridges})
    return {**facts, "gpus": gpus}


def still_redirecting(facts: Mapping[str, Any], decision: AcsDecision) -> list[str]:
    """The managed ports whose ACS still redirects (read after the unit ran)."""
    ports = switch_ports_above_gpus(facts)
    return [
        port.bdf
        for port in decision.ports
        if _redirect_bits((ports.get(port.bdf) or {}).get("acs") or {})
    ]
