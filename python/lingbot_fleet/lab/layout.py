"""Where the lab's pieces live in the repository and inside a node."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
LAB_SOURCE = REPO_ROOT / "lab"
PROFILES_DIR = LAB_SOURCE / "profiles"
NATIVE_DIR = LAB_SOURCE / "native"
NATIVE_BUILD_DIR = NATIVE_DIR / "build"
LAB_HOME = Path(os.environ.get("LINGBOT_LAB_HOME", REPO_ROOT / ".lab"))
LAB_INVENTORY = REPO_ROOT / "inventory" / "lab" / "hosts.yml"

GROUP_NAME = "gpu-nodes"
FIRST_SSH_PORT = 22201
KERNEL_VERSION = "6.1.0-28-amd64"
LIB_DIR_IN_NODE = "usr/lib/x86_64-linux-gnu"

# (source under lab/, destination in the node, mode)
NODE_FILES: tuple[tuple[str, str, int], ...] = (
    ("node/bin/lingbot-lab-firmware", "opt/lingbot-lab/bin/lingbot-lab-firmware", 0o755),
    ("node/bin/lingbot-lab-incident", "opt/lingbot-lab/bin/lingbot-lab-incident", 0o755),
    ("node/bin/update-grub", "usr/sbin/update-grub", 0o755),
    ("node/bin/grubby", "usr/sbin/grubby", 0o755),
    ("node/bin/nvidia-smi", "usr/bin/nvidia-smi", 0o755),
    ("node/bin/nvidia-persistenced", "usr/bin/nvidia-persistenced", 0o755),
    ("node/bin/numactl", "usr/bin/numactl", 0o755),
    (
        "node/systemd/lingbot-lab-firmware.service",
        "etc/systemd/system/lingbot-lab-firmware.service",
        0o644,
    ),
)
# Installed only in nodes whose profile has NVSwitches (the unit enabled in multi-user.target),
# removed from the others: the fabric manager's daemon and its unit, where its package puts them.
NVSWITCH_NODE_FILES: tuple[tuple[str, str, int], ...] = (
    ("node/bin/nv-fabricmanager", "usr/bin/nv-fabricmanager", 0o755),
    (
        "node/systemd/nvidia-fabricmanager.service",
        "lib/systemd/system/nvidia-fabricmanager.service",
        0o644,
    ),
)
FABRIC_MANAGER_WANTS = "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service"
NODE_TREES: tuple[tuple[str, str], ...] = (
    ("node/lingbot_lab", "opt/lingbot-lab/lib/lingbot_lab"),
    ("lingbot_standin", "opt/lingbot"),
)
