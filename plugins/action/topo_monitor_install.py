"""Action plugin topo_monitor_install: build the monitor's zipapp here, install it there.

Builds ``python -m lingbot_fleet.monitor`` as one zipapp from the installed lingbot_fleet
package (lingbot_fleet.nodeapp), cached by content in this run's local temp directory so
a play builds it once for all its hosts, and runs the topo_monitor_install module with
the archive's sha256. A node that already has that archive costs one module call and no
transfer. Otherwise the module writes nothing and answers ``app_upload_required``; the
archive is then copied into the remote temp directory and the module runs again with
``app_src``. Check mode never uploads.
"""

from __future__ import annotations

import os
from typing import Any

from ansible import constants
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

MODULE = "topo_monitor_install"
REMOTE_NAME = "lingbot-fleet-monitor.pyz"


def build_app(interpreter: str) -> tuple[str, str]:
    """(path, sha256) of the cached zipapp; AnsibleActionFail says what is wrong."""
    try:
        from lingbot_fleet import nodeapp  # noqa: PLC0415 - the installed package
    except ImportError as error:
        raise AnsibleActionFail(
            f"{MODULE}: the lingbot_fleet package is not importable on the controller "
            f"({error}); install lingbot-fleet into the Python that runs ansible-playbook"
        ) from error
    cache_dir = os.path.join(constants.DEFAULT_LOCAL_TMP, "lingbot_fleet_nodeapp")
    try:
        path = nodeapp.cached_build(cache_dir, interpreter=interpreter)
        return str(path), nodeapp.sha256_file(path)
    except (nodeapp.NodeAppError, OSError) as error:
        raise AnsibleActionFail(f"{MODULE}: cannot build the monitor's zipapp: {error}") from error


class ActionModule(ActionBase):
    # The temp directory is made only when the archive has to be uploaded.
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        for internal in ("app_checksum", "app_src"):
            if internal in args:
                raise AnsibleActionFail(f"{MODULE}: {internal} is set by the action plugin")
        interpreter = args.get("python")
        if not interpreter:
            raise AnsibleActionFail(f"{MODULE}: python is required (the node's Python 3)")
        local, args["app_checksum"] = build_app(str(interpreter))
        try:
            answer = self._execute_module(MODULE, module_args=args, task_vars=task_vars)
            if answer.get("app_upload_required") and not answer.get("failed"):
                shell = self._connection._shell
                tmpdir = shell.tmpdir or self._make_tmp_path()
                remote = shell.join_path(tmpdir, REMOTE_NAME)
                self._transfer_file(local, remote)
                self._fixup_perms2((tmpdir, remote))
                args["app_src"] = remote
                answer = self._execute_module(MODULE, module_args=args, task_vars=task_vars)
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(answer)
        return result
