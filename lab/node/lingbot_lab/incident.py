"""lingbot-lab-incident: a fault that strikes while the node runs (CONTRACT.md, "Incidents").

``gpu-lost --gpu N``: GPU N falls off the bus - the driver's state marks it lost (NVML
answers GPU_IS_LOST for it, nvidia-smi prints its error) and the kernel log gets its
Xid 79 line. ``xid --gpu N --code C``: the kernel log gets an Xid line for GPU N.
``nvlink-errors --gpu N --counter replay --per-minute M``: an NVLink error counter of GPU N
starts rising now, M a minute (the profile fault nvlink_errors, from now on). What a
process already holds (LingBot's CUDA contexts) is not taken back, as on a real node
where the other GPUs keep working. An incident lasts until the next boot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from lingbot_lab import LAB_PROFILE_PATH
from lingbot_lab.firmware import INCIDENTS_NAME, run_dir, write_state
from lingbot_lab.grubcfg import root_path, write_atomically
from lingbot_lab.hwstate import compute_state
from lingbot_lab.kernel_log import append, uptime_s, xid_text
from lingbot_lab.profile import NVLINK_ERROR_COUNTERS, load_profile_json

# Incidents that change what the driver reports (the state is computed again with them);
# an xid incident only writes the kernel log.
STATE_INCIDENTS = ("gpu_lost", "nvlink_errors")


def _incidents(lab: Path) -> list[dict[str, Any]]:
    path = lab / INCIDENTS_NAME
    return json.loads(path.read_text()) if path.exists() else []


def strike(root: str, fault: dict[str, Any]) -> str:
    """Apply ``fault`` ({kind: gpu_lost|xid|nvlink_errors, gpu, code?, message?, counter?,
    per_minute?}); returns what happened."""
    profile = load_profile_json(Path(root_path(root, LAB_PROFILE_PATH.lstrip("/"))))
    lab = run_dir(root)
    gpu_count = len(profile["gpus"])
    if not 0 <= fault["gpu"] < gpu_count:
        raise ValueError(f"--gpu {fault['gpu']}: the profile has GPUs 0..{gpu_count - 1}")
    bdf = profile["gpus"][fault["gpu"]]["bdf"]
    incidents = _incidents(lab)
    if fault["kind"] == "nvlink_errors":
        if not profile["gpus"][fault["gpu"]]["nvlinks"]:
            raise ValueError(f"--gpu {fault['gpu']}: that GPU has no NVLinks")
        fault["since_unix_s"] = time.time()
    write_atomically(lab / INCIDENTS_NAME, json.dumps([*incidents, fault], indent=2) + "\n")
    incidents.append(fault)
    if fault["kind"] in STATE_INCIDENTS and (lab / "state.json").exists():
        # Without state.json no driver is loaded: nothing more to lose or to count.
        state = json.loads((lab / "state.json").read_text())
        changed = [f for f in incidents if f["kind"] in STATE_INCIDENTS]
        faults = [*profile["faults"], *changed]
        cmdline = (lab / "cmdline").read_text().strip()
        booted_unix_s = float(state["boot"].get("booted_unix_s") or 0.0)
        write_state(lab, compute_state({**profile, "faults": faults}, cmdline, booted_unix_s))
    if fault["kind"] == "nvlink_errors":
        rate = f"{fault['per_minute']} a minute"
        return f"GPU {fault['gpu']}: NVLink {fault['counter']} errors rise {rate}"
    text = xid_text(bdf, 79 if fault["kind"] == "gpu_lost" else fault["code"], fault.get("message"))
    append(lab, text, uptime_s())
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="lingbot-lab-incident", description="Inject a fault into the running node."
    )
    kinds = parser.add_subparsers(dest="kind", required=True)
    lost = kinds.add_parser("gpu-lost", help="a GPU falls off the bus (Xid 79)")
    lost.add_argument("--gpu", type=int, required=True)
    xid = kinds.add_parser("xid", help="an Xid line in the kernel log")
    xid.add_argument("--gpu", type=int, required=True)
    xid.add_argument("--code", type=int, required=True)
    xid.add_argument("--message")
    errors = kinds.add_parser("nvlink-errors", help="an NVLink error counter starts rising")
    errors.add_argument("--gpu", type=int, required=True)
    errors.add_argument("--counter", choices=tuple(NVLINK_ERROR_COUNTERS), required=True)
    errors.add_argument("--per-minute", type=int, required=True)
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    fault: dict[str, Any] = {"kind": options.kind.replace("-", "_"), "gpu": options.gpu}
    if options.kind == "xid":
        if not 1 <= options.code <= 65535:
            parser.error(f"--code {options.code}: an Xid code is 1..65535")
        fault["code"] = options.code
        fault["message"] = options.message
    if options.kind == "nvlink-errors":
        if options.per_minute < 1:
            parser.error(f"--per-minute {options.per_minute}: give 1 or more")
        fault.update(counter=options.counter, per_minute=options.per_minute, count=0)
    try:
        print(f"lingbot-lab-incident: {strike(os.environ.get('LINGBOT_LAB_ROOT', ''), fault)}")
    except (OSError, ValueError) as error:
        print(f"lingbot-lab-incident: {error}", file=sys.stderr)
        return 1
    return 0
