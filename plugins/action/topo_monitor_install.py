"""Action plugin topo_monitor_install: build the monitor's zipapp here, install it there.

Builds ``python -m lingbot_fleet.monitor`` as one zipapp from the installed lingbot_fleet
package (lingbot_fleet.controller.nodeapp), cached by content in this run's local temp directory so
a play builds it once for all its hosts, and runs the topo_monitor_install module with
the archive's sha256. A node that already has that archive costs one module call and no
transfer. Otherwise the module writes nothing and answers ``app_upload_required``; the
archive is then copied into the remote temp directory and the module runs again with
``app_src``. Check mode never uploads.

A node whose receipt stands costs no call at all: a call of the module that changed nothing
leaves a receipt of its result and of what it read, wrote and ran systemctl on
(``lingbot_fleet.node.receipts``), gpu_facts returns it with that evidence now
(``ansible_facts.lingbot_receipts``), and when the digest of this task's options (with the
archive's sha256) and of the toolkit's code is the receipt's and nothing moved, the plugin
answers with the module's own recorded result (``receipt_action.answer``).
docs/converged-runs.md is the contract.
"""

from __future__ import annotations

import os
from typing import Any

from ansible import constants
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from lingbot_fleet.controller import nodeapp
from lingbot_fleet.controller.ansible_data import controller_options
from lingbot_fleet.controller.receipt_action import answer, refuse_internal
from lingbot_fleet.monitor.install_options import INSTALL_ARGUMENT_SPEC, RECEIPT_ROLE

MODULE = "topo_monitor_install"
REMOTE_NAME = "lingbot-fleet-monitor.pyz"


def build_app(interpreter: str) -> tuple[str, str]:
    """(path, sha256) of the cached zipapp; AnsibleActionFail says what is wrong."""
    cache_dir = os.path.join(constants.DEFAULT_LOCAL_TMP, "lingbot_fleet_nodeapp")
    try:
        path = nodeapp.cached_build(cache_dir, interpreter=interpreter)
        return str(path), nodeapp.sha256_file(path)
    except (nodeapp.NodeAppError, OSError) as error:
        raise AnsibleActionFail(f"{MODULE}: cannot build the monitor's zipapp: {error}") from error


class ActionModule(ActionBase):
    # The temp directory is made only when the archive has to be uploaded.
    TRANSFERS_FILES = False

    def receipt_answer(self, args: dict[str, Any], task_vars: dict[str, Any]) -> dict | None:
        """Set ``receipt_digest`` in ``args``; the module's recorded result when the node's
        receipt stands for these options and this code, else None."""
        params = controller_options(self._task, args, INSTALL_ARGUMENT_SPEC)
        if params is None:
            return None
        return answer(
            self,
            MODULE,
            RECEIPT_ROLE,
            INSTALL_ARGUMENT_SPEC,
            params,
            args=args,
            task_vars=task_vars,
        )

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp
        args = dict(self._task.args)
        refuse_internal(args, MODULE, ("app_checksum", "app_src", "receipt_digest"))
        interpreter = args.get("python")
        if not interpreter:
            raise AnsibleActionFail(f"{MODULE}: python is required (the node's Python 3)")
        local, args["app_checksum"] = build_app(str(interpreter))
        answer = self.receipt_answer(args, task_vars or {})
        if answer is not None:
            result.update(answer)
            return result
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
