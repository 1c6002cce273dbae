#!/bin/sh
# Start the path monitor once, as its timer does, and wait for its end (a oneshot service).
# Once more on 219/CGROUP: systemd in the lab's container sometimes cannot set up the unit's
# cgroup right after the timer's own run left one it could not remove ("Failed to kill
# control group ... Input/output error"); the monitor never ran then. Any other failure
# prints the unit's journal and fails.
unit=lingbot-fleet-monitor.service
if ! systemctl start "$unit"; then
    if [ "$(systemctl show -p ExecMainStatus --value "$unit")" = 219 ]; then
        systemctl reset-failed "$unit"
        sleep 2
        systemctl start "$unit" && exit 0
    fi
    journalctl -u "$unit" --no-pager -n 80 >&2
    exit 1
fi
