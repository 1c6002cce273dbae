"""The driver's parts out of step: its loaded kernel module against what NVML reports, on
NVSwitch systems the fabric manager (running, at the driver's own version), and NVML not
usable while nvidia-smi answers (the GPUs' health then unknown).

The facts give the kernel module's version (``driver.kernel_module_version``, from
/proc/driver/nvidia/version), the driver version NVML (or nvidia-smi) reports
(``driver_version``) and, on an NVSwitch system, ``fabric_manager`` (facts/driver_versions.py).
A version or a state the facts do not know is unknown: a note (FABRIC_MANAGER_UNKNOWN),
never ok by silence. Stdlib only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..facts.schema import NVML_NOT_USED_NOTE, NVML_TURNED_OFF
from ..node.findings import Finding

FABRIC_MANAGER_SERVICE = "nvidia-fabricmanager"


def _node_finding(code: str, severity: str, message: str, evidence: Any, fix: str) -> Finding:
    return Finding(code, severity, "node", message, evidence, fix)


def _driver(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    driver = facts.get("driver")
    return driver if isinstance(driver, Mapping) else {}


def loaded_driver_version(facts: Mapping[str, Any]) -> str | None:
    """The version of the driver that runs: its loaded kernel module's, else NVML's."""
    return _driver(facts).get("kernel_module_version") or facts.get("driver_version")


def module_mismatch_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """GPU_DRIVER_MODULE_MISMATCH (critical) when the loaded kernel module and the driver
    version NVML reports are both known and differ."""
    module = _driver(facts).get("kernel_module_version")
    reported = facts.get("driver_version")
    if not module or not reported or module == reported:
        return []
    source = (facts.get("sources") or {}).get("gpus") or "NVML"
    return [
        _node_finding(
            "GPU_DRIVER_MODULE_MISMATCH",
            "critical",
            f"the loaded NVIDIA kernel module is {module} (/proc/driver/nvidia/version) but "
            f"{source} reports driver {reported}: the driver's libraries and the module that "
            "runs are out of step, and CUDA may refuse to start or behave as neither version",
            {"kernel_module_version": module, "driver_version": reported, "source": source},
            "compare /proc/driver/nvidia/version, nvidia-smi's driver version and the installed"
            " driver packages (dpkg -l 'nvidia-*' or rpm -qa 'nvidia-*'); a driver updated "
            "without the reboot that loads its module: reboot the node (in its batch); "
            "libraries of another installation first on the library path (ldconfig -p | grep"
            " libnvidia-ml): remove them; then gather the facts again",
        )
    ]


def _branch(version: str) -> str:
    return version.split(".", maxsplit=1)[0]


def _install_fix(driver_version: str | None) -> str:
    if driver_version is None:
        return (
            "install the fabric manager of exactly the driver's version "
            "(nvidia-fabricmanager-<driver branch>)"
        )
    branch = _branch(driver_version)
    return (
        f"install the fabric manager of exactly the driver's version, {driver_version}: "
        f"nvidia-fabricmanager-{branch} (apt-get install nvidia-fabricmanager-{branch}="
        f"{driver_version}-1; dnf install nvidia-fabric-manager-{driver_version}), and hold "
        "it with the driver so that both update together"
    )


def fabric_manager_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """On an NVSwitch system (the facts carry ``fabric_manager``):
    FABRIC_MANAGER_NOT_RUNNING (critical) when its unit is not active,
    FABRIC_MANAGER_VERSION_MISMATCH (critical) when its version is not the driver's, and
    FABRIC_MANAGER_UNKNOWN (info) naming what could not be known."""
    manager = facts.get("fabric_manager")
    if not isinstance(manager, Mapping):
        return []
    driver_version = loaded_driver_version(facts)
    version = manager.get("version")
    evidence = {
        "unit": manager.get("unit"),
        "state": manager.get("state"),
        "version": version,
        "driver_version": driver_version,
        "evidence": list(manager.get("evidence") or []),
    }
    findings = []
    if manager.get("active") is False:
        findings.append(
            _node_finding(
                "FABRIC_MANAGER_NOT_RUNNING",
                "critical",
                f"the NVSwitch fabric manager ({manager.get('unit')}) is "
                f"{manager.get('state')}, not running: without it the NVLink fabric is not "
                "set up, and CUDA does not start on an NVSwitch system",
                evidence,
                f"systemctl enable --now {FABRIC_MANAGER_SERVICE}; when it does not stay up, "
                f"read why (journalctl -u {FABRIC_MANAGER_SERVICE}): a fabric manager of "
                "another version than the driver's refuses to start"
                + ("" if version else f"; {_install_fix(driver_version)}"),
            )
        )
    if version and driver_version and version != driver_version:
        findings.append(
            _node_finding(
                "FABRIC_MANAGER_VERSION_MISMATCH",
                "critical",
                f"the NVSwitch fabric manager is version {version} but the driver is "
                f"{driver_version}: the fabric manager must be of exactly the driver's "
                "version, or it does not set up the NVLink fabric",
                evidence,
                f"{_install_fix(driver_version)}; then systemctl restart {FABRIC_MANAGER_SERVICE}",
            )
        )
    unknown = [
        words
        for words, known in (
            ("whether it runs", manager.get("active") is not None),
            ("its version", bool(version)),
            ("the driver's version", bool(driver_version)),
        )
        if not known
    ]
    if unknown:
        findings.append(
            _node_finding(
                "FABRIC_MANAGER_UNKNOWN",
                "info",
                "the fabric manager of this NVSwitch system is not judged on what is not "
                f"known: {', '.join(unknown)}",
                evidence,
                f"read systemctl status {FABRIC_MANAGER_SERVICE} and nv-fabricmanager "
                "--version on the node; gather the facts where systemctl and the fabric "
                "manager's package are installed",
            )
        )
    return findings


def health_unread_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """GPU_HEALTH_UNREAD (info) when NVML was asked and could not be used, so the GPUs were
    read through nvidia-smi: their identity and links are known, but memory errors, NVLink
    state and error counters, clock events, the recovery action and the fabric state are
    not (they come from NVML only): unknown, never healthy by silence."""
    if (facts.get("sources") or {}).get("gpus") != "nvidia-smi" or not facts.get("gpus"):
        return []
    reasons = [
        note
        for note in facts.get("notes") or []
        if str(note).startswith(NVML_NOT_USED_NOTE) and NVML_TURNED_OFF not in str(note)
    ]
    if not reasons:
        return []
    return [
        _node_finding(
            "GPU_HEALTH_UNREAD",
            "info",
            "the GPUs were read through nvidia-smi because NVML could not be used, so their "
            "health is unknown: memory errors, NVLink state and error counters, clock events, "
            "the recovery action and the fabric state come from NVML only",
            {"notes": reasons},
            "make NVML usable on the node: install nvidia-ml-py (pip) or the distribution's "
            "python3-pynvml for the Python the toolkit runs, or give gpu_facts its path "
            "(gpu_facts_nvml_python_path); then gather the facts again",
        )
    ]


def driver_version_findings(facts: Mapping[str, Any]) -> list[Finding]:
    """Every finding of this module for a node's facts."""
    return (
        module_mismatch_findings(facts)
        + fabric_manager_findings(facts)
        + health_unread_findings(facts)
    )
