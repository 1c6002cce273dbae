"""The toolkit's own state on a node, under /var/lib/lingbot-fleet: one constant per
directory, defined here only; every module, role default and document takes it from here.

Standard library only: runs on nodes (module_utils, the monitor's program).
"""

from __future__ import annotations

STATE_ROOT = "/var/lib/lingbot-fleet"
# Numbered generations of every file the toolkit changed, and the node's run lock (runlock).
GENERATIONS_DIR = f"{STATE_ROOT}/generations"
# What each role's module last verified, so a converged node is answered from it (receipts).
RECEIPTS_DIR = f"{STATE_ROOT}/receipts"
# The saved p2p_probe documents (probe_saved; latest.json is the last one).
PROBE_DIR = f"{STATE_ROOT}/probe"
# The rollout gate's own probe documents, apart from the provisioning run's.
ROLLOUT_PROBE_DIR = f"{STATE_ROOT}/rollout/probe"
# The path monitor's state (monitor.config, monitor.state).
MONITOR_DIR = f"{STATE_ROOT}/monitor"
# kernel_cmdline's copies of the boot loader files it edits.
KERNEL_CMDLINE_BACKUP_DIR = f"{STATE_ROOT}/backup"
