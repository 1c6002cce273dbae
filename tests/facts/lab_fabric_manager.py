"""The fabric manager of a lab node rendered on the host (tests/facts): the lab's own
nv-fabricmanager, and a systemctl stand-in that answers ``is-active`` of its unit as the
booted node's systemd would (failed when the daemon refuses to start, else active).

``install_fabric_manager`` puts both under the node root's /usr/bin, where the facts look
for programs, as the lab manager installs the fabric manager only on NVSwitch profiles.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
LAB_NODE = REPO_ROOT / "lab" / "node"
UNIT = "nvidia-fabricmanager.service"


def _wrapper(path: Path, lab_root: Path, argv: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(shlex.quote(word) for word in argv)
    path.write_text(
        "#!/bin/sh\n"
        f"LINGBOT_LAB_ROOT={shlex.quote(str(lab_root))} "
        f'LINGBOT_LAB_LIB={shlex.quote(str(LAB_NODE))} exec {command} "$@"\n'
    )
    path.chmod(0o755)


def install_fabric_manager(root: Path, lab_root: Path, raw_profile: dict[str, Any]) -> None:
    """nv-fabricmanager and systemctl under ``root``/usr/bin, reading ``lab_root``."""
    profile_path = lab_root / "opt" / "lingbot-lab" / "profile.json"
    profile_path.parent.mkdir(parents=True, exist_ok=True)
    profile_path.write_text(json.dumps(raw_profile))
    bin_dir = root / "usr" / "bin"
    _wrapper(
        bin_dir / "nv-fabricmanager",
        lab_root,
        [sys.executable, str(LAB_NODE / "bin" / "nv-fabricmanager")],
    )
    _wrapper(bin_dir / "systemctl", lab_root, [sys.executable, __file__])


def is_active(argv: list[str]) -> int:
    """``systemctl is-active nvidia-fabricmanager.service``: active (0) or failed (3)."""
    sys.path.insert(0, os.environ["LINGBOT_LAB_LIB"])
    from lingbot_lab.fabric_manager import start_problem
    from lingbot_lab.profile import load_profile_json

    if argv[:1] != ["is-active"] or argv[1:] not in ([UNIT], [UNIT.removesuffix(".service")]):
        print(f"systemctl stand-in: {' '.join(argv)}: not modelled", file=sys.stderr)
        return 1
    root = os.environ["LINGBOT_LAB_ROOT"]
    profile = load_profile_json(Path(root) / "opt" / "lingbot-lab" / "profile.json")
    if start_problem(root, profile) is not None:
        print("failed")
        return 3
    print("active")
    return 0


if __name__ == "__main__":
    sys.exit(is_active(sys.argv[1:]))
