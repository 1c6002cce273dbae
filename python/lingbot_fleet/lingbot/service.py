"""What the lingbot_service module does on a node: plan the instances from the node's own
readings, render their configs and units, verify the units, create the account, start,
restart or stop the instances and wait until each is ready, keep its receipt.
roles/lingbot_service/library/lingbot_service.py holds the module's documentation and its
entry point. Stdlib only (runs on the node)."""

from __future__ import annotations

import grp
import inspect
import json
import os
import pwd
import time
from typing import Any, NoReturn, Protocol

from ..node import receipts, systemd, values
from ..node.nodefiles import NodeChanges, run_command
from ..node.systemd import parse_units
from ..plan import PlanInputError
from ..plan.node import NodePlan, plan_on_node
from . import layout, service_options
from . import warmup as warm_up_program
from .config import ConfigError, build_config, to_yaml


class AnsibleModule(Protocol):
    """What this code uses of the module object (Ansible's AnsibleModule): the package
    imports nothing of Ansible, so it runs wherever the module runs and in tests."""

    params: dict[str, Any]
    check_mode: bool

    def get_bin_path(self, arg: str, required: bool = False, opt_dirs: Any = None) -> Any: ...

    def fail_json(self, msg: str, **kwargs: Any) -> NoReturn: ...

    def warn(self, warning: str) -> None: ...


INSTANCE_KEYS = (
    "name",
    "port",
    "numa_node",
    "gpus",
    "gpus_argument",
    "environment",
    "peer_access_threshold_gbytes_per_s",
    "config",
)
NOLOGIN = "/usr/sbin/nologin"
POLL_INTERVAL_S = 1.0
# A port held by another process for this long means the instance cannot serve there.
FOREIGN_GRACE_S = 3.0
REQUEST_TIMEOUT_S = 10.0
CHAT_PATH = warm_up_program.CHAT_PATH
METRICS_PATH = warm_up_program.METRICS_PATH
METRIC_NAME = warm_up_program.READY_METRIC
UNIT_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "UnitFileState",
    "MainPID",
    "InvocationID",
    "Result",
    "ControlGroup",
)
RUNNING_STATES = ("active", "activating", "reloading")
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


class ServiceError(Exception):
    """A failure with what the module should return besides the message."""

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.details = details


# --- inputs -------------------------------------------------------------------------------

# Options written into the units as words (ExecStart, Environment=), checked for a line
# break before anything; the role variable each comes from is lingbot_service_<option>.
WORD_OPTIONS = ("python", "numactl", "pythonpath")
WORD_LIST_OPTIONS = ("entry", "extra_args")


def check_values(params: dict) -> None:
    """Every option that lands in a unit, secrets.env or a request, checked for its kind
    (lingbot_fleet.node.values, the policy check's validators) before any change; the API key
    also replaced by its checked form. ServiceError naming the role variable otherwise."""

    def variable(option: str) -> str:
        return f"lingbot_service_{option}"

    try:
        params["api_key"] = values.api_key(params["api_key"], variable("api_key"))
        for option in ("listen_host", "health_host"):
            values.listen_host(params[option], variable(option))
        values.service_exposure(params["listen_host"], params["api_key"], params["health_host"])
        if params["readiness_only"]:
            return
        for option in ("user", "group"):
            values.posix_name(params[option], variable(option))
        for index, name in enumerate(params["device_groups"]):
            values.posix_name(name, f"{variable('device_groups')}[{index}]")
        values.unit_path(params["model_path"], variable("model_path"))
        for option in WORD_OPTIONS:
            values.unit_text(params[option], variable(option))
        for option in WORD_LIST_OPTIONS:
            for index, word in enumerate(params[option]):
                values.unit_text(word, f"{variable(option)}[{index}]")
    except ValueError as error:
        raise ServiceError(f"{error}. Nothing was written.") from None


def planned_instances(plan: dict, keys: tuple[str, ...]) -> list[dict]:
    instances = plan.get("instances")
    if not isinstance(instances, list) or not instances:
        raise ServiceError(
            "plan has no instances; pass plan_inputs instead, which plans on the node and "
            "leaves a node without an instance as it is (fail_without_instances=false)"
        )
    names = []
    for position, instance in enumerate(instances):
        missing = [key for key in keys if not isinstance(instance, dict) or key not in instance]
        if missing:
            raise ServiceError(
                f"plan instance {position} lacks {', '.join(missing)}; pass a plan made by "
                "lingbot_fleet.plan.build_plan unchanged, or plan_inputs"
            )
        names.append(layout.check_instance_name(instance["name"]))
    if len(set(names)) != len(names):
        raise ServiceError(f"plan lists an instance twice: {', '.join(names)}")
    return instances


def launch_of(params: dict) -> layout.Launch:
    return layout.Launch(
        numactl=params["numactl"],
        python=params["python"],
        model_path=params["model_path"],
        entry=tuple(params["entry"]),
        host=params["listen_host"],
        extra_args=tuple(params["extra_args"]),
        warm_up=params["warm_up"],
        warm_up_timeout_s=params["health_timeout_s"],
        readiness_host=params["health_host"],
    )


def unit_settings(params: dict) -> layout.UnitSettings:
    return layout.UnitSettings(
        user=params["user"],
        group=params["group"],
        device_groups=tuple(params["device_groups"]),
        model_path=params["model_path"],
        pythonpath=params["pythonpath"],
        restart_delay_s=params["restart_delay_s"],
        start_limit_burst=params["start_limit_burst"],
        start_limit_interval_s=params["start_limit_interval_s"],
        hardening=params["hardening"],
    )


def check_model(params: dict) -> None:
    path = os.path.join(params["model_path"], "config.json")
    if not os.path.isfile(layout.on_root(params["root"], path)):
        raise ServiceError(
            f"{path} does not exist: LingBot's --model-path must be a model directory "
            "(Hugging Face style, with config.json). Put the model there, or point "
            "lingbot_service_model_path at it; this role installs no model. Nothing was written."
        )


def check_numactl(changes: NodeChanges, params: dict) -> None:
    changes.note_read(params["numactl"])
    path = layout.on_root(params["root"], params["numactl"])
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ServiceError(
            f"{params['numactl']} is not an executable: ExecStart binds every instance with "
            "numactl. Install the numactl package (lingbot_service_install_numactl) or point "
            "lingbot_service_numactl at it. Nothing was written."
        )


def config_texts(params: dict, instances: list[dict]) -> dict[str, str]:
    """Instance -> config.yaml text, overrides merged; ServiceError listing every problem."""
    texts, problems = {}, []
    for instance in instances:
        try:
            document = build_config(
                instance["config"],
                params["config_overrides"],
                instance["peer_access_threshold_gbytes_per_s"],
            )
        except ConfigError as error:
            problems += [f"instance {instance['name']}: {problem}" for problem in error.problems]
            continue
        texts[instance["name"]] = to_yaml(document, layout.config_header(instance["name"]))
    if problems:
        raise ServiceError(
            "lingbot_service_config_overrides would make config.yaml invalid (nothing was "
            "written):\n- " + "\n- ".join(problems),
            problems=problems,
        )
    return texts


def unit_files(params: dict, instances: list[dict]) -> dict[str, str]:
    """Node path -> content of lingbot@.service and every drop-in."""
    launch = launch_of(params)
    files = {layout.template_path(): layout.template_text(unit_settings(params), params["header"])}
    for instance in instances:
        files[layout.dropin_path(instance["name"])] = layout.dropin_text(
            instance, launch, params["header"]
        )
    return files


# --- systemd --------------------------------------------------------------------------------


def verify_units(module: AnsibleModule, files: dict[str, str], names: list[str]) -> None:
    """systemd-analyze verify every instance in a private copy; fail on any complaint."""
    verified = systemd.verify_units(
        module.get_bin_path("systemd-analyze", required=True),
        {os.path.relpath(path, layout.UNIT_DIR): text for path, text in files.items()},
        [layout.unit_name(name) for name in names],
        watch=("lingbot@",),
        prefix="lingbot-units.",
    )
    if verified.refused:
        output = verified.output.strip()
        raise ServiceError(
            "systemd-analyze verify refused the LingBot units; nothing was written:\n" + output,
            rc=verified.rc,
            verify_output=output,
        )


def unit_states(systemctl: str, names: list[str]) -> dict[str, dict[str, str]]:
    units = [layout.unit_name(name) for name in names]
    done = run_command(
        [systemctl, "show", f"--property={','.join(UNIT_PROPERTIES)}", "--", *units], check=False
    )
    shown = parse_units(done.stdout)
    return {name: shown.get(layout.unit_name(name), {}) for name in names}


# --- the account ----------------------------------------------------------------------------


def ensure_account(module: AnsibleModule, changes: NodeChanges, params: dict) -> None:
    """The service group and user, created or completed only where something is missing."""
    user, group = params["user"], params["group"]
    for path in service_options.ACCOUNT_FILES:
        changes.note_read(path)
    missing_groups = []
    for name in params["device_groups"]:
        try:
            grp.getgrnam(name)
        except KeyError:
            missing_groups.append(name)
    if missing_groups:
        raise ServiceError(
            f"group {', '.join(missing_groups)} does not exist on this node; it should own the "
            "GPU device nodes. Create it, or drop it from lingbot_service_device_groups"
        )

    def tool(name: str) -> str:
        return module.get_bin_path(name, required=True, opt_dirs=["/usr/sbin", "/sbin"])

    try:
        group_id: int | None = grp.getgrnam(group).gr_gid
    except KeyError:
        group_id = None
        changes.run([tool("groupadd"), "--system", group], f"create the system group {group}")
    try:
        account = pwd.getpwnam(user)
    except KeyError:
        argv = [tool("useradd"), "--system", "--gid", group]
        if params["device_groups"]:
            argv += ["--groups", ",".join(params["device_groups"])]
        argv += ["--home-dir", layout.STATE_DIR, "--no-create-home", "--shell", NOLOGIN, user]
        changes.run(argv, f"create the system user {user}")
        return
    if group_id is None or account.pw_gid != group_id:
        changes.run(
            [tool("usermod"), "--gid", group, user], f"make {group} the primary group of {user}"
        )
    absent = [
        name
        for name in params["device_groups"]
        if user not in grp.getgrnam(name).gr_mem and grp.getgrnam(name).gr_gid != account.pw_gid
    ]
    if absent:
        changes.run(
            [tool("usermod"), "--append", "--groups", ",".join(absent), user],
            f"add {user} to the group(s) {', '.join(absent)}",
        )


# --- files ----------------------------------------------------------------------------------


def write_files(
    changes: NodeChanges,
    params: dict,
    instances: list[dict],
    configs: dict[str, str],
    units: dict[str, str],
) -> None:
    group = params["group"]
    changes.make_dir(layout.CONFIG_DIR, mode=0o755)
    plan_path = layout.PLAN_PATH
    current_plan = changes.read(plan_path)
    current_text = current_plan.decode("utf-8", "replace") if current_plan is not None else None
    if layout.same_plan(current_text, params["plan"]):
        # Same plan, maybe a newer probe timestamp: keep the file, fix only mode and owner.
        changes.write_file(plan_path, current_plan or b"", mode=0o644)
    else:
        changes.write_file(plan_path, layout.plan_text(params["plan"]), mode=0o644)
    for instance in instances:
        name = instance["name"]
        changes.make_dir(layout.instance_dir(name), mode=0o750, group=group)
        changes.write_file(layout.marker_path(name), layout.marker_text(name), mode=0o644)
        changes.write_file(layout.config_path(name), configs[name], mode=0o640, group=group)
        if params["api_key"]:
            changes.write_file(
                layout.secrets_path(name),
                layout.secrets_text(params["api_key"], params["header"]),
                mode=0o600,
                secret=True,
            )
        else:
            changes.remove_file(layout.secrets_path(name))
    changes.make_dir(os.path.dirname(layout.WARM_UP_PROGRAM), mode=0o755)
    changes.write_file(layout.WARM_UP_PROGRAM, warm_up_source(), mode=0o755)
    for path, text in units.items():
        changes.write_file(path, text, mode=0o644)


def warm_up_source() -> str:
    """The warm-up program's text: the module_utils file this module carries, as it is."""
    return inspect.getsource(warm_up_program)


def stale_check(stale: list[layout.PresentInstance]) -> None:
    for instance in stale:
        if instance.toolkit_dir and instance.foreign_files:
            raise ServiceError(
                f"{layout.instance_dir(instance.name)} belongs to instance {instance.name}, "
                f"which the plan no longer has, but holds {', '.join(instance.foreign_files)}, "
                "which lingbot-fleet did not write. Move that away (or set "
                "lingbot_service_remove_stale_instances=false); nothing was changed"
            )


def remove_stale(
    changes: NodeChanges, systemctl: str, stale: list[layout.PresentInstance], root: str
) -> None:
    template_present = os.path.isfile(layout.on_root(root, layout.template_path()))
    for instance in stale:
        unit = layout.unit_name(instance.name)
        if template_present:
            changes.run(
                [systemctl, "disable", "--now", unit], f"stop and disable {unit} (not planned)"
            )
        if instance.dropin:
            changes.remove_file(layout.dropin_path(instance.name))
            changes.remove_empty_dir(layout.dropin_dir(instance.name))
        if instance.toolkit_dir:
            changes.remove_tree(layout.instance_dir(instance.name), instance.dir_files)


# --- services -------------------------------------------------------------------------------


def apply_services(
    changes: NodeChanges, systemctl: str, names: list[str], restart: list[str]
) -> dict[str, list[str]]:
    """Restart the changed, start the stopped, enable the disabled; say which."""
    for name in names:
        changes.watch_unit(layout.unit_name(name))
    states = unit_states(systemctl, names)
    failed = [n for n in names if states[n].get("ActiveState") == "failed"]
    running = [n for n in names if states[n].get("ActiveState") in RUNNING_STATES]
    done = {
        "restarted": [n for n in names if n in restart and n in running],
        "started": [n for n in names if n not in running],
        "enabled": [n for n in names if states[n].get("UnitFileState") != "enabled"],
    }

    def units(selected: list[str]) -> list[str]:
        return [layout.unit_name(name) for name in selected]

    if failed:
        # A unit that hit its start limit refuses to start until the count is reset.
        changes.run(
            [systemctl, "reset-failed", "--", *units(failed)],
            f"reset the failed state of {', '.join(units(failed))}",
        )
    if done["enabled"]:
        changes.run(
            [systemctl, "enable", "--", *units(done["enabled"])],
            f"enable {', '.join(units(done['enabled']))}",
        )
    if done["restarted"]:
        # A start that fails (the warm-up, say) is reported by wait_ready with the journal.
        changes.run(
            [systemctl, "restart", "--", *units(done["restarted"])],
            f"restart {', '.join(units(done['restarted']))} (their files changed)",
            check=False,
        )
    if done["started"]:
        changes.run(
            [systemctl, "start", "--", *units(done["started"])],
            f"start {', '.join(units(done['started']))}",
            check=False,
        )
    return done


# --- readiness ------------------------------------------------------------------------------


def listening_inodes(port: int) -> set[str] | None:
    """Socket inodes listening on TCP ``port`` (any address); None when /proc says nothing."""
    inodes: set[str] = set()
    seen = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table, encoding="ascii") as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    return inodes if seen else None


def unit_pids(state: dict[str, str]) -> set[int]:
    pids: set[int] = set()
    group = state.get("ControlGroup") or ""
    for base in CGROUP_ROOTS if group else ():
        try:
            with open(f"{base}{group}/cgroup.procs", encoding="ascii") as handle:
                pids.update(int(line) for line in handle if line.strip() not in ("", "0"))
            break
        except (OSError, ValueError):
            continue
    main_pid = int(state.get("MainPID") or 0)
    if main_pid:
        pids.add(main_pid)
    return pids


def owns_socket(pids: set[int], inodes: set[str]) -> bool:
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for descriptor in descriptors:
            try:
                if os.readlink(f"/proc/{pid}/fd/{descriptor}") in wanted:
                    return True
            except OSError:
                continue
    return False


def readiness_once(params: dict, instance: dict, state: dict[str, str]) -> tuple[str, str]:  # noqa: PLR0911 - one return per readiness step
    """("ready" | "waiting" | "foreign" | "failed", why) for one instance, right now."""
    unit, port = layout.unit_name(instance["name"]), int(instance["port"])
    active = state.get("ActiveState", "unknown")
    if active in ("failed", "inactive"):
        return "failed", f"{unit} is {active} (result {state.get('Result', 'unknown')})"
    if active != "active":
        return "waiting", f"{unit} is {active} ({state.get('SubState', '')})"
    inodes = listening_inodes(port)
    if inodes is not None:
        if not inodes:
            return "waiting", f"nothing listens on port {port} yet"
        if not owns_socket(unit_pids(state), inodes):
            return "foreign", (
                f"port {port} is held by a process outside {unit} (another service, or a "
                "container sharing this node's network namespace), so whatever answers there "
                "is not this instance. Free the port, or give this node its own "
                "lingbot_service_base_port"
            )
    host, key = params["health_host"], params["api_key"]
    status, text = warm_up_program.request(
        host, port, "GET", METRICS_PATH, timeout_s=REQUEST_TIMEOUT_S
    )
    if status != 200:
        return "waiting", f"GET {METRICS_PATH} answered {status or text}"
    if METRIC_NAME not in text:
        return "waiting", f"GET {METRICS_PATH} has no {METRIC_NAME}"
    chat = {"messages": [{"role": "user", "content": "lingbot-fleet readiness"}], "max_tokens": 1}
    try:
        status, text = warm_up_program.request(
            host, port, "POST", CHAT_PATH, timeout_s=REQUEST_TIMEOUT_S, body=chat, api_key=key
        )
    except warm_up_program.WarmUpError as error:
        return "failed", str(error)
    if status != 200:
        return "waiting", f"POST {CHAT_PATH} answered {status or ''} {text[:200]}".strip()
    try:
        choices = json.loads(text).get("choices")
    except (ValueError, AttributeError):
        choices = None
    if not choices:
        return "waiting", f"POST {CHAT_PATH} answered without choices"
    return "ready", ""


def journal(journalctl: str | None, unit: str, lines: int) -> list[str]:
    if journalctl is None:
        return ["(journalctl is not installed)"]
    done = run_command(
        [journalctl, f"--unit={unit}", f"--lines={lines}", "--no-pager", "--output=short-precise"],
        check=False,
    )
    return (done.stdout or done.stderr).splitlines()


def wait_ready(module: AnsibleModule, systemctl: str, instances: list[dict]) -> dict:
    params = module.params
    started_s = time.monotonic()
    deadline_s = started_s + params["health_timeout_s"]
    pending = {instance["name"]: instance for instance in instances}
    readiness: dict[str, dict] = {}
    reasons: dict[str, str] = {}
    foreign_since: dict[str, float] = {}
    while pending:
        states = unit_states(systemctl, list(pending))
        for name, instance in list(pending.items()):
            verdict, reasons[name] = readiness_once(params, instance, states[name])
            if verdict == "foreign":
                # Give LingBot a moment to log its own complaint (address in use) first.
                first_s = foreign_since.setdefault(name, time.monotonic())
                verdict = "failed" if time.monotonic() - first_s >= FOREIGN_GRACE_S else "waiting"
            if verdict == "ready":
                readiness[name] = {
                    "ready": True,
                    "port": int(instance["port"]),
                    "main_pid": int(states[name].get("MainPID") or 0),
                    "waited_s": round(time.monotonic() - started_s, 2),
                }
                del pending[name]
            elif verdict == "failed" or time.monotonic() >= deadline_s:
                unit = layout.unit_name(name)
                lines = journal(module.get_bin_path("journalctl"), unit, params["journal_lines"])
                raise ServiceError(
                    f"{unit} is not ready on port {instance['port']} after "
                    f"{time.monotonic() - started_s:.0f} s (limit {params['health_timeout_s']} "
                    f"s): {reasons[name]}. Its last journal lines follow; systemctl status "
                    f"{unit} shows more.\n" + "\n".join(lines),
                    instance=name,
                    journal=lines,
                    readiness=readiness,
                )
        if pending:
            time.sleep(max(0.0, min(POLL_INTERVAL_S, deadline_s - time.monotonic())))
    return readiness


# --- the module -----------------------------------------------------------------------------

ARGUMENT_SPEC = service_options.ARGUMENT_SPEC


def converge(module: AnsibleModule, changes: NodeChanges, instances: list[dict]) -> dict:
    params = module.params
    root = params["root"]
    names = [instance["name"] for instance in instances]
    # Everything that can refuse the run does so before the first change.
    configs = config_texts(params, instances)
    check_model(params)
    check_numactl(changes, params)
    units = unit_files(params, instances)
    stale = []
    if params["remove_stale_instances"]:
        stale = layout.stale_instances(layout.present_instances(root, changes.listdir), names)
        stale_check(stale)
    if params["verify_units"] and any(
        changes.read(path) != text.encode() for path, text in units.items()
    ):
        verify_units(module, units, names)

    systemctl = module.get_bin_path("systemctl", required=True)
    ensure_account(module, changes, params)
    remove_stale(changes, systemctl, stale, root)
    write_files(changes, params, instances, configs, units)
    unit_changed = any(path.startswith(f"{layout.UNIT_DIR}/") for path in changes.changed_paths)
    if unit_changed:
        changes.run([systemctl, "daemon-reload"], "reload systemd (units changed)")
    restart = layout.instances_to_restart(
        changes.changed_paths, names, layout.template_path() in changes.changed_paths
    )
    services = apply_services(changes, systemctl, names, restart)
    readiness = {} if module.check_mode else wait_ready(module, systemctl, instances)
    return {
        "files": list(changes.changed_paths),
        "removed_instances": [instance.name for instance in stale],
        "daemon_reload": unit_changed,
        "readiness": readiness,
        **services,
    }


NO_CHANGES = {
    "files": [],
    "restarted": [],
    "started": [],
    "enabled": [],
    "removed_instances": [],
    "daemon_reload": False,
    "readiness": {},
}


def plan_here(module: AnsibleModule, changes: NodeChanges) -> NodePlan:
    """The plan from O(plan_inputs) and this node; fails the module before any change."""
    params = module.params
    try:
        planned = plan_on_node(
            params["plan_inputs"], params["root"], params["model_path"], changes.note_read
        )
    except PlanInputError as error:
        module.fail_json(msg=f"cannot plan LingBot for this host: {error}", instances=[])
    for warning in planned.warnings:
        module.warn(warning)
    plan = planned.plan
    refusal = planned.refusal(params["fail_without_instances"])
    if refusal is not None:
        names = [instance["name"] for instance in plan["instances"]]
        module.fail_json(msg=refusal, instances=names, plan=plan, changed=False)
    return planned


def keep_receipt(
    module: AnsibleModule, changes: NodeChanges, result: dict, config_layers: tuple
) -> str:
    """The receipt of a call that changed nothing (docs/converged-runs.md), kept while every
    instance is the process seen ready; the reading each later run takes is every instance
    answering. Only a saving: one that cannot be written costs the next run this call."""
    params = module.params
    names = result["instances"]
    systemctl = module.get_bin_path("systemctl", required=True)
    states = unit_states(systemctl, names)
    for name in names:
        seen = str(result["readiness"].get(name, {}).get("main_pid", ""))
        if states[name].get("MainPID") != seen or not states[name].get("InvocationID"):
            return f"not written: {layout.unit_name(name)} is not the process seen ready"
    root = params["root"]
    try:
        with open(layout.on_root(root, layout.PLAN_PATH), encoding="utf-8") as handle:
            plan_text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        return f"not written: {error}"
    return receipts.keep(
        service_options.RECEIPT_ROLE,
        params["receipt_digest"],
        changes,
        result,
        receipts.show_units(systemctl),
        root=root,
        readings=service_options.answers_reading(params, result["readiness"]),
        data=service_options.receipt_data(plan_text, config_layers),
    )


def drop_receipt(module: AnsibleModule) -> None:
    """A call that converges, or a readiness check that fails, takes the receipt away
    (outside check mode): only a call that ends with every instance ready writes one
    again, so a failure is never answered from an older receipt."""
    if not module.check_mode:
        try:
            receipts.remove_receipt(service_options.RECEIPT_ROLE, module.params["root"])
        except OSError as error:
            module.warn(f"cannot remove the receipt of {service_options.RECEIPT_ROLE}: {error}")


plan_fields = service_options.plan_fields
with_plan_fact = service_options.with_plan_fact
