"""The systemd sandbox every unit the toolkit writes for a CUDA process shares.

Stdlib-only (used by the modules that render units on nodes). The settings keep CUDA
working - the GPU device nodes stay reachable by driver (``DeviceAllow`` by major number,
no ``PrivateDevices``), pinned memory may be locked (``LimitMEMLOCK`` in the unit), /proc
keeps /proc/driver/nvidia (no ``ProcSubset=pid``) - and take away the rest: no new
privileges, a read-only system, no kernel tunables, modules or clock, no
namespaces, realtime or SUID, the system-service call set without privileged calls.
Each unit adds what it needs (writable paths, address families, capabilities); both stay
at an exposure of 2.0 or less in ``systemd-analyze security``.
"""

from __future__ import annotations

CUDA_SANDBOX = (
    "# Sandbox that keeps CUDA working: the GPU device nodes stay reachable by driver (no",
    "# PrivateDevices), /proc keeps /proc/driver/nvidia (no ProcSubset=pid).",
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "ProtectHome=yes",
    "PrivateTmp=yes",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "ProtectProc=invisible",
    "RestrictSUIDSGID=yes",
    "RestrictNamespaces=yes",
    "RestrictRealtime=yes",
    "LockPersonality=yes",
    "KeyringMode=private",
    "UMask=0077",
    "SystemCallArchitectures=native",
    "# numactl needs the @resources calls (sched_setaffinity, set_mempolicy).",
    "SystemCallFilter=@system-service",
    "SystemCallFilter=~@privileged",
    "SystemCallErrorNumber=EPERM",
    "DevicePolicy=closed",
    "# By driver (major number), so every GPU counts, whenever its node appears:",
    "# nvidia-frontend is /dev/nvidiactl and /dev/nvidia0..N, nvidia-uvm is /dev/nvidia-uvm",
    "# and /dev/nvidia-uvm-tools, nvidia-caps the MIG capability nodes.",
    "DeviceAllow=char-nvidia-frontend rw",
    "DeviceAllow=char-nvidia-uvm rw",
    "DeviceAllow=char-nvidia-caps rw",
)

# LingBot: an unprivileged user serving HTTP; no capability at all.
SERVER_SANDBOX = (
    *CUDA_SANDBOX,
    "ProtectKernelLogs=yes",
    "CapabilityBoundingSet=",
    "AmbientCapabilities=",
    "RemoveIPC=yes",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
)

# The monitor: root for PCI config space past its first 64 bytes (CAP_SYS_ADMIN) and for
# node_exporter's textfile directory, which its package may own (CAP_DAC_OVERRIDE), and
# for the kernel log's Xid lines (/dev/kmsg; CAP_SYSLOG where kernel.dmesg_restrict is
# set, and no ProtectKernelLogs, which would hide /dev/kmsg); no network at all.
MONITOR_SANDBOX = (
    *CUDA_SANDBOX,
    "CapabilityBoundingSet=CAP_SYS_ADMIN CAP_DAC_OVERRIDE CAP_SYSLOG",
    "DeviceAllow=/dev/kmsg r",
    "AmbientCapabilities=",
    "PrivateNetwork=yes",
    "IPAddressDeny=any",
    "RestrictAddressFamilies=AF_UNIX",
    "MemoryDenyWriteExecute=yes",
)
