"""LingBot's layout on a node: paths, unit names, unit files and the ExecStart command line.

Stdlib-only: runs on nodes (shipped as ``ansible.module_utils.lingbot_fleet.lingbot.layout``).
This module is the one owner of that layout; everything that reads or writes
``/etc/lingbot`` or the ``lingbot@`` units goes through it::

    /etc/lingbot/plan.json                              the plan in force
    /etc/lingbot/<instance>/.lingbot-fleet-instance     marks a directory the toolkit made
    /etc/lingbot/<instance>/config.yaml                 LingBot's --config
    /etc/lingbot/<instance>/secrets.env                 LINGBOT_API_KEY (0600), optional
    /etc/systemd/system/lingbot@.service                what every instance shares
    /etc/systemd/system/lingbot@<instance>.service.d/10-lingbot-fleet-plan.conf
                                                        GPUs, NUMA binding, ExecStart, warm-up
    /usr/local/libexec/lingbot-fleet/lingbot-warm-up    the warm-up (lingbot_fleet.lingbot.warmup)

Only a directory holding the marker (or, from before the marker, a config.yaml that starts
with the toolkit's header) is an instance directory: anything else under /etc/lingbot
(``certs/``, say) is never taken for a stale instance.

The server's option names live in ``Flag`` only (docs/lingbot.md): a server version that
names them differently is a change there.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..node import values
from ..node.hardening import SERVER_SANDBOX
from ..node.rooted import on_root
from ..node.systemd_text import SystemdTextError, systemd_word
from ..node.systemd_text import split_systemd_words as split_words

CONFIG_DIR = "/etc/lingbot"
PLAN_PATH = f"{CONFIG_DIR}/plan.json"
CONFIG_NAME = "config.yaml"
SECRETS_NAME = "secrets.env"
MARKER_NAME = ".lingbot-fleet-instance"
UNIT_DIR = "/etc/systemd/system"
SERVICE = "lingbot"
TEMPLATE_UNIT = f"{SERVICE}@.service"
DROPIN_NAME = "10-lingbot-fleet-plan.conf"
STATE_DIR = "/var/lib/lingbot"
WARM_UP_PROGRAM = "/usr/local/libexec/lingbot-fleet/lingbot-warm-up"
# systemd's limit for each start step: the warm-up's own limit plus this much.
WARM_UP_TIMEOUT_MARGIN_S = 30
API_KEY_VARIABLE = "LINGBOT_API_KEY"
MANAGED_HEADER = (
    "Managed by lingbot-fleet (role lingbot_service); changes made here are overwritten."
)
# Exit status 2: LingBot refused its command line or config.yaml (docs/lingbot.md).
CONTRACT_EXIT_STATUS = 2
INSTANCE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_UNIT_RE = re.compile(rf"{SERVICE}@(.+)\.service")
_DROPIN_DIR_RE = re.compile(rf"{SERVICE}@(.+)\.service\.d")


class LayoutError(ValueError):
    """A name, a command line or a file that does not fit the layout."""


# --- names and paths --------------------------------------------------------------------


def check_instance_name(name: str) -> str:
    if not INSTANCE_NAME_RE.fullmatch(name):
        raise LayoutError(
            f"instance name {name!r} cannot be a systemd instance; use letters, digits, "
            "'_', '.', '-' (at most 64, not starting with '_', '.' or '-')"
        )
    return name


def unit_name(instance: str) -> str:
    return f"{SERVICE}@{instance}.service"


def instance_of_unit(unit: str) -> str | None:
    """``lingbot@main.service`` -> ``main``; None for any other unit."""
    match = _UNIT_RE.fullmatch(unit)
    return match.group(1) if match and match.group(1) else None


def instance_dir(instance: str) -> str:
    return f"{CONFIG_DIR}/{instance}"


def config_path(instance: str) -> str:
    return f"{CONFIG_DIR}/{instance}/{CONFIG_NAME}"


def secrets_path(instance: str) -> str:
    return f"{CONFIG_DIR}/{instance}/{SECRETS_NAME}"


def marker_path(instance: str) -> str:
    return f"{CONFIG_DIR}/{instance}/{MARKER_NAME}"


def template_path() -> str:
    return f"{UNIT_DIR}/{TEMPLATE_UNIT}"


def dropin_dir(instance: str) -> str:
    return f"{UNIT_DIR}/{unit_name(instance)}.d"


def dropin_path(instance: str) -> str:
    return f"{dropin_dir(instance)}/{DROPIN_NAME}"


def instance_of_path(path: str) -> str | None:
    """The instance whose running process reads ``path`` (config, secrets, drop-in)."""
    if path.startswith(f"{CONFIG_DIR}/"):
        parts = path[len(CONFIG_DIR) + 1 :].split("/")
        if len(parts) == 2 and parts[1] in (CONFIG_NAME, SECRETS_NAME):
            return parts[0]
        return None
    if path.startswith(f"{UNIT_DIR}/"):
        parts = path[len(UNIT_DIR) + 1 :].split("/")
        match = _DROPIN_DIR_RE.fullmatch(parts[0])
        if match and len(parts) == 2 and parts[1] == DROPIN_NAME:
            return match.group(1)
    return None


# --- systemd words ----------------------------------------------------------------------


def split_systemd_words(text: str) -> list[str]:
    """The words of an ExecStart value, as ``systemd_word`` wrote them (quotes, %%, $$)."""
    try:
        return split_words(text)
    except SystemdTextError as error:
        raise LayoutError(str(error)) from error


def exec_start_value(unit_texts: Iterable[str]) -> str | None:
    """The ExecStart in force after a unit file and its drop-ins, read in that order."""
    command: str | None = None
    for text in unit_texts:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("[") and line.endswith("]"):
                section = line
                continue
            key, sep, value = line.partition("=")
            if sep and section == "[Service]" and key.strip() == "ExecStart":
                command = value.strip() or None
    return command


# --- the command line -------------------------------------------------------------------


class Flag:
    """LingBot's option names (docs/lingbot.md, "Command line")."""

    CONFIG = "--config"
    MODEL_PATH = "--model-path"
    GPUS = "--gpus"
    DEVICE = "--device"
    PEER_ACCESS_THRESHOLD = "--peer-access-threshold"
    HOST = "--host"
    PORT = "--port"
    BATCH_SIZE = "--batch-size"
    KV_CACHE_DTYPE = "--kv-cache-dtype"
    PREFILL_CHUNK_SIZE = "--prefill-chunk-size"
    OFFLOAD_KV = "--offload-kv"
    MAX_NEW_TOKENS = "--max-new-tokens"
    BALANCER_CONFIG = "--balancer-config"
    VERBOSE = "--verbose"


# Options that take a value; the others (--offload-kv, --verbose) are switches.
VALUE_FLAGS = (
    Flag.CONFIG,
    Flag.MODEL_PATH,
    Flag.GPUS,
    Flag.DEVICE,
    Flag.PEER_ACCESS_THRESHOLD,
    Flag.HOST,
    Flag.PORT,
    Flag.BATCH_SIZE,
    Flag.KV_CACHE_DTYPE,
    Flag.PREFILL_CHUNK_SIZE,
    Flag.MAX_NEW_TOKENS,
    Flag.BALANCER_CONFIG,
)
# Loopback: LingBot serves beyond the node only when lingbot_service_listen_host says so
# (and then only with an API key, values.service_exposure).
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Launch:
    """How every instance of a node starts LingBot (the role's settings)."""

    numactl: str
    python: str
    model_path: str
    entry: tuple[str, ...] = ("-m", "lingbot")
    host: str = DEFAULT_HOST
    extra_args: tuple[str, ...] = ()
    # The warm-up around each start (lingbot_fleet.lingbot.warmup); off when warm_up is False.
    warm_up: bool = True
    warm_up_timeout_s: int = 60
    readiness_host: str = "127.0.0.1"


@dataclass(frozen=True)
class ExecStart:
    """A parsed ExecStart: numactl binding, the Python and entry, then LingBot's options."""

    numactl: str
    cpunodebind: str
    membind: str
    python: str
    entry: tuple[str, ...]
    options: tuple[tuple[str, str | None], ...]

    def value(self, flag: str) -> str | None:
        """The value of ``flag`` (the last one wins, as in LingBot's parser); None if absent."""
        found = None
        for name, value in self.options:
            if name == flag:
                found = value
        return found

    def has(self, flag: str) -> bool:
        return any(name == flag for name, _ in self.options)

    @property
    def gpus(self) -> tuple[int, ...]:
        """CUDA ordinals, primary first, from --gpus or --device gpu:N."""
        gpus = self.value(Flag.GPUS)
        if gpus is not None:
            return tuple(int(item) for item in gpus.split(","))
        device = self.value(Flag.DEVICE)
        if device is not None and device.startswith("gpu:"):
            return (int(device[4:]),)
        return ()

    @property
    def port(self) -> int | None:
        port = self.value(Flag.PORT)
        return int(port) if port is not None else None

    def replaced(self, flag: str, value: str | None, *, drop: Sequence[str] = ()) -> ExecStart:
        """A copy with ``flag`` set to ``value`` where the first of ``drop``/``flag`` was."""
        removed = {flag, *drop}
        options: list[tuple[str, str | None]] = []
        placed = False
        for name, current in self.options:
            if name in removed:
                if not placed:
                    options.append((flag, value))
                    placed = True
                continue
            options.append((name, current))
        if not placed:
            options.append((flag, value))
        return dataclasses.replace(self, options=tuple(options))

    def without(self, *flags: str) -> ExecStart:
        options = tuple((name, value) for name, value in self.options if name not in flags)
        return dataclasses.replace(self, options=options)

    def argv(self) -> list[str]:
        words = [
            self.numactl,
            f"--cpunodebind={self.cpunodebind}",
            f"--membind={self.membind}",
            self.python,
            *self.entry,
        ]
        for name, value in self.options:
            words.append(name)
            if value is not None:
                words.append(value)
        return words

    def text(self) -> str:
        """The ExecStart value, quoted for a unit file."""
        return command_text(self.argv())


def command_text(argv: Sequence[str], what: str = "ExecStart") -> str:
    """A command line as an Exec*= value of a unit file, each word quoted for systemd;
    LayoutError (naming ``what``) for a word that cannot stand in a unit line."""
    return " ".join(unit_word(word, what) for word in argv)


def unit_word(word: str, what: str) -> str:
    """``systemd_word``, its refusal a LayoutError naming ``what``."""
    try:
        return systemd_word(word)
    except SystemdTextError as error:
        raise LayoutError(f"{what}: {error}") from None


def _checked(check: Any, value: Any, what: str) -> Any:
    """A values.py validator's answer, its refusal a LayoutError."""
    try:
        return check(value, what)
    except ValueError as error:
        raise LayoutError(str(error)) from None


def threshold_text(gbytes_per_s: float) -> str:
    return f"{gbytes_per_s:g}"


def exec_start(instance: Mapping[str, Any], launch: Launch) -> ExecStart:
    """The numactl-bound LingBot command line of one plan instance (docs/lingbot.md)."""
    node = str(instance["numa_node"])
    options: list[tuple[str, str | None]] = [
        (Flag.CONFIG, config_path(instance["name"])),
        (Flag.MODEL_PATH, launch.model_path),
        (Flag.GPUS, str(instance["gpus_argument"])),
        (
            Flag.PEER_ACCESS_THRESHOLD,
            threshold_text(float(instance["peer_access_threshold_gbytes_per_s"])),
        ),
        (Flag.HOST, launch.host),
        (Flag.PORT, str(instance["port"])),
    ]
    parsed_extra = _options(list(launch.extra_args), "lingbot_service_extra_args")
    return ExecStart(
        launch.numactl, node, node, launch.python, tuple(launch.entry), (*options, *parsed_extra)
    )


def _options(words: list[str], where: str) -> list[tuple[str, str | None]]:
    options: list[tuple[str, str | None]] = []
    index = 0
    while index < len(words):
        word = words[index]
        name, sep, inline = word.partition("=")
        if name in VALUE_FLAGS and sep:
            options.append((name, inline))
        elif word in VALUE_FLAGS:
            if index + 1 >= len(words):
                raise LayoutError(f"{where}: {word} needs a value")
            options.append((word, words[index + 1]))
            index += 1
        else:
            # Switches, and options this toolkit does not know, are kept as they are.
            options.append((word, None))
        index += 1
    return options


def parse_exec_start(command: str | Sequence[str]) -> ExecStart:
    """Parse what ``exec_start`` builds: a unit's ExecStart value or an argv list."""
    words = split_systemd_words(command) if isinstance(command, str) else list(command)
    if words and words[0][:1] in "-@+!:":
        words[0] = words[0].lstrip("-@+!:")
    binding: dict[str, str] = {}
    index = 1
    while index < len(words) and words[index].startswith("--") and "=" in words[index]:
        name, _, value = words[index][2:].partition("=")
        binding[name] = value
        index += 1
    if not words or "cpunodebind" not in binding or "membind" not in binding:
        raise LayoutError(
            f"ExecStart {' '.join(words)!r} does not start with numactl --cpunodebind=N "
            "--membind=N; it was not written by the lingbot_service role"
        )
    try:
        config_at = words.index(Flag.CONFIG, index)
    except ValueError:
        raise LayoutError(
            f"ExecStart {' '.join(words)!r} has no {Flag.CONFIG}; it was not written by the "
            "lingbot_service role"
        ) from None
    if config_at == index:
        raise LayoutError(f"ExecStart {' '.join(words)!r} names no Python before {Flag.CONFIG}")
    return ExecStart(
        numactl=words[0],
        cpunodebind=binding["cpunodebind"],
        membind=binding["membind"],
        python=words[index],
        entry=tuple(words[index + 1 : config_at]),
        options=tuple(_options(words[config_at:], "ExecStart")),
    )


# --- file contents ----------------------------------------------------------------------


def warm_up_peer_pairs(instance: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The directed pairs (CUDA ordinals, plan order) LingBot maps for peer access: those of
    the plan's ``peer_access_pairs`` measured at or above the instance's threshold."""
    if not instance.get("peer_access"):
        return []
    ordinal_of = {int(gpu): ordinal for ordinal, gpu in enumerate(instance["gpus"])}
    threshold = float(instance["peer_access_threshold_gbytes_per_s"])
    pairs = []
    for pair in instance.get("peer_access_pairs") or []:
        bandwidth = pair.get("gbytes_per_s")
        if bandwidth is None or float(bandwidth) < threshold:
            continue
        pairs.append((ordinal_of[int(pair["src"])], ordinal_of[int(pair["dst"])]))
    return pairs


def warm_up_lines(instance: Mapping[str, Any], launch: Launch) -> list[str]:
    """ExecStartPre (the GPUs, bound like LingBot) and ExecStartPost (LingBot itself) of
    one instance's warm-up; empty when the warm-up is off."""
    if not launch.warm_up:
        return []
    node = str(instance["numa_node"])
    pairs = ",".join(f"{source}:{target}" for source, target in warm_up_peer_pairs(instance))
    gpus = [
        launch.numactl,
        f"--cpunodebind={node}",
        f"--membind={node}",
        launch.python,
        WARM_UP_PROGRAM,
        "gpus",
        *(["--peer-pairs", pairs] if pairs else []),
    ]
    ready = [
        launch.python,
        WARM_UP_PROGRAM,
        "ready",
        "--host",
        launch.readiness_host,
        "--port",
        str(instance["port"]),
        "--timeout-s",
        str(launch.warm_up_timeout_s),
    ]
    return [
        "# Warm-up: contexts and peer mappings on the GPUs first; then the unit stays",
        "# activating until LingBot answers one-token chat completions in steady time.",
        f"TimeoutStartSec={launch.warm_up_timeout_s + WARM_UP_TIMEOUT_MARGIN_S}",
        "ExecStartPre=",
        "ExecStartPre=" + command_text(gpus, "ExecStartPre"),
        "ExecStartPost=",
        "ExecStartPost=" + command_text(ready, "ExecStartPost"),
    ]


def comment(text: str, what: str = "header") -> list[str]:
    """Comment lines, one per line of ``text``; LayoutError for a control character other
    than the line breaks (a lone carriage return would hide the rest of the line)."""
    for line in text.split("\n"):
        _checked(values.unit_text, line, what)
    return [f"# {line}".rstrip() for line in text.splitlines()]


def dropin_text(instance: Mapping[str, Any], launch: Launch, header: str = "") -> str:
    """The drop-in holding one instance's GPUs (by UUID, plan order) and its ExecStart.

    Every value from the plan (and so from the node: GPU UUIDs, NUMA node) is checked for
    its kind first, so none can end a line and start a directive; LayoutError otherwise."""
    name = check_instance_name(instance["name"])
    where = f"plan instance {name}"
    _checked(values.tcp_port, instance["port"], f"{where}: port")
    gpus = _checked(values.unit_text, ", ".join(str(gpu) for gpu in instance["gpus"]), where)
    node = _checked(values.unit_text, str(instance["numa_node"]), f"{where}: numa_node")
    gpus_argument = _checked(
        values.unit_text, str(instance["gpus_argument"]), f"{where}: gpus_argument"
    )
    environment = instance["environment"]
    lines = [
        *comment(header),
        f"# Instance {name} of the plan ({PLAN_PATH}): GPU {gpus} "
        f"(NVML indices, primary first) on NUMA node {node}.",
        f"# CUDA_VISIBLE_DEVICES lists their UUIDs in that order, so {Flag.GPUS} "
        f"{gpus_argument} keeps it.",
        "[Service]",
        *(
            "Environment=" + unit_word(f"{key}={environment[key]}", f"{where}: {key}")
            for key in ("CUDA_DEVICE_ORDER", "CUDA_VISIBLE_DEVICES")
        ),
        "ExecStart=",
        "ExecStart=" + command_text(exec_start(instance, launch).argv(), f"{where}: ExecStart"),
        *warm_up_lines(instance, launch),
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class UnitSettings:
    """What ``lingbot@.service`` holds for every instance."""

    user: str = "lingbot"
    group: str = "lingbot"
    device_groups: tuple[str, ...] = ("video",)
    model_path: str = "/var/lib/lingbot/model"
    pythonpath: str = ""
    restart_delay_s: int = 5
    start_limit_burst: int = 5
    start_limit_interval_s: int = 300
    hardening: bool = True


def template_text(service: UnitSettings, header: str = "") -> str:
    """``lingbot@.service``: what every instance shares; the drop-ins add the rest.

    The names and the path written bare (User=, Group=, SupplementaryGroups=,
    AssertPathIsDirectory=) are checked for their kind; LayoutError otherwise."""
    user = _checked(values.posix_name, service.user, "lingbot_service_user")
    group = _checked(values.posix_name, service.group, "lingbot_service_group")
    device_groups = [
        _checked(values.posix_name, name, f"lingbot_service_device_groups[{index}]")
        for index, name in enumerate(service.device_groups)
    ]
    model_path = _checked(values.unit_path, service.model_path, "lingbot_service_model_path")
    lines = [
        *comment(header),
        f"# LingBot, one instance per plan instance ({PLAN_PATH}). This template holds",
        f"# what every instance shares; {SERVICE}@<instance>.service.d/{DROPIN_NAME}",
        "# holds the instance's GPUs, NUMA binding and ExecStart.",
        "[Unit]",
        "Description=LingBot inference server (instance %i)",
        f"Documentation=file://{PLAN_PATH}",
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target nvidia-persistenced.service",
        f"AssertPathIsDirectory={model_path}",
        f"# At most {service.start_limit_burst} starts in {service.start_limit_interval_s} s, "
        "then systemd gives up until the role runs again (it resets the count).",
        f"StartLimitIntervalSec={service.start_limit_interval_s}",
        f"StartLimitBurst={service.start_limit_burst}",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"Group={group}",
    ]
    if device_groups:
        lines.append("SupplementaryGroups=" + " ".join(device_groups))
    lines.append("Environment=" + systemd_word(f"HOME={STATE_DIR}"))
    if service.pythonpath:
        pythonpath = f"PYTHONPATH={service.pythonpath}"
        lines.append("Environment=" + unit_word(pythonpath, "lingbot_service_pythonpath"))
    lines += [
        "Environment=PYTHONUNBUFFERED=1",
        "# Secrets (the API key), mode 0600, absent when there are none.",
        f"EnvironmentFile=-{CONFIG_DIR}/%i/{SECRETS_NAME}",
        f"WorkingDirectory={STATE_DIR}",
        f"StateDirectory={os.path.basename(STATE_DIR)}",
        "Restart=on-failure",
        f"RestartSec={service.restart_delay_s}",
        f"# Exit status {CONTRACT_EXIT_STATUS}: LingBot refused its command line or "
        "config.yaml; restarting cannot help.",
        f"RestartPreventExitStatus={CONTRACT_EXIT_STATUS}",
        "TimeoutStopSec=30",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=65536",
    ]
    if service.hardening:
        lines += SERVER_SANDBOX
    lines += ["", "[Install]", "WantedBy=multi-user.target"]
    return "\n".join(lines) + "\n"


def env_file_value(value: str) -> str:
    """``value`` quoted for a systemd EnvironmentFile, read back byte for byte.

    Inside double quotes systemd unescapes backslash, double quote, backquote and dollar,
    and keeps everything else; newlines and NUL have no safe form and are refused.
    """
    if "\n" in value or "\r" in value or "\0" in value:
        raise LayoutError("an EnvironmentFile value cannot hold a newline or NUL")
    escaped = re.sub(r'(["\\`$])', r"\\\1", value)
    return f'"{escaped}"'


def secrets_text(api_key: str, header: str = "") -> str:
    return "\n".join([*comment(header), f"{API_KEY_VARIABLE}={env_file_value(api_key)}"]) + "\n"


def config_header(instance: str) -> str:
    """The comment at the top of an instance's config.yaml (also marks older directories)."""
    return f"{MANAGED_HEADER}\nInstance {instance} of {PLAN_PATH}."


def marker_text(instance: str) -> str:
    return (
        f"lingbot-fleet made this directory for LingBot instance {instance}; the "
        "lingbot_service role removes it when the plan no longer has the instance.\n"
    )


# --- the plan in force ------------------------------------------------------------------


def plan_text(plan: Mapping[str, Any]) -> str:
    """plan.json as written: sorted keys, four spaces (as Ansible's to_nice_json)."""
    return json.dumps(plan, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def _untimed(plan: Any) -> Any:
    if not isinstance(plan, Mapping):
        return plan
    inputs = plan.get("inputs")
    if not isinstance(inputs, Mapping):
        return dict(plan)
    return {**plan, "inputs": {**inputs, "probe_timestamp": None}}


def same_plan(current_text: str | None, plan: Mapping[str, Any]) -> bool:
    """Whether plan.json already holds ``plan``; a new probe timestamp alone is no change."""
    if current_text is None:
        return False
    try:
        current = json.loads(current_text)
    except ValueError:
        return False
    return _untimed(current) == _untimed(json.loads(json.dumps(plan)))


# --- what a node has --------------------------------------------------------------------


@dataclass
class PresentInstance:
    """An instance found on the node, and which of its files are the toolkit's."""

    name: str
    toolkit_dir: bool = False
    dir_files: list[str] = field(default_factory=list)
    foreign_files: list[str] = field(default_factory=list)
    dropin: bool = False
    dropin_dir_files: list[str] = field(default_factory=list)
    enable_links: list[str] = field(default_factory=list)

    @property
    def ours(self) -> bool:
        """Made by the toolkit: its directory or its drop-in, or a bare enable link."""
        if self.toolkit_dir or self.dropin:
            return True
        return bool(self.enable_links) and not self.dir_files and not self.dropin_dir_files


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _files_listed(root: str, listed: Callable[[str], list[str]], node_dir: str) -> list[str]:
    """Every file under ``node_dir`` (node paths), as os.walk finds them, through ``listed``,
    so every directory it walks is a listing its caller can watch."""
    files = []
    for name in listed(node_dir):
        path = f"{node_dir}/{name}"
        real = on_root(root, path)
        if os.path.isdir(real):
            if not os.path.islink(real):  # os.walk does not follow a link to a directory
                files += _files_listed(root, listed, path)
            continue
        files.append(path)
    return sorted(files)


def is_toolkit_dir(root: str, instance: str) -> bool:
    """The marker, or (directories made before it) config.yaml starting with the header."""
    if os.path.isfile(on_root(root, marker_path(instance))):
        return True
    try:
        with open(on_root(root, config_path(instance)), encoding="utf-8") as handle:
            first = handle.readline().rstrip("\n")
    except (OSError, UnicodeDecodeError):
        return False
    return first == f"# {MANAGED_HEADER}"


def present_instances(
    root: str = "/", listdir: Callable[[str], list[str]] | None = None
) -> dict[str, PresentInstance]:
    """Every lingbot@ instance the node has a directory, drop-in or enable link for.
    ``listdir`` lists a node path (NodeChanges.listdir, so the listings are watched)."""

    def listed(path: str) -> list[str]:
        return listdir(path) if listdir is not None else _listdir(on_root(root, path))

    found: dict[str, PresentInstance] = {}
    for name in listed(CONFIG_DIR):
        if not os.path.isdir(on_root(root, instance_dir(name))) or not INSTANCE_NAME_RE.fullmatch(
            name
        ):
            continue
        entry = found.setdefault(name, PresentInstance(name))
        entry.dir_files = _files_listed(root, listed, instance_dir(name))
        entry.toolkit_dir = is_toolkit_dir(root, name)
        ours = {config_path(name), secrets_path(name), marker_path(name)}
        entry.foreign_files = [path for path in entry.dir_files if path not in ours]
    unit_root = on_root(root, UNIT_DIR)
    for name in listed(UNIT_DIR):
        match = _DROPIN_DIR_RE.fullmatch(name)
        if match and os.path.isdir(os.path.join(unit_root, name)):
            instance = match.group(1)
            entry = found.setdefault(instance, PresentInstance(instance))
            entry.dropin_dir_files = _files_listed(root, listed, dropin_dir(instance))
            entry.dropin = dropin_path(instance) in entry.dropin_dir_files
        if name.endswith(".wants"):
            for link in listed(f"{UNIT_DIR}/{name}"):
                instance = instance_of_unit(link)
                if instance:
                    entry = found.setdefault(instance, PresentInstance(instance))
                    entry.enable_links.append(f"{UNIT_DIR}/{name}/{link}")
    return found


def stale_instances(
    present: Mapping[str, PresentInstance], planned: Iterable[str]
) -> list[PresentInstance]:
    """The toolkit's instances that the plan no longer has, by name."""
    keep = set(planned)
    return [present[name] for name in sorted(present) if name not in keep and present[name].ours]


def instances_to_restart(
    changed_paths: Iterable[str], planned: Iterable[str], template_changed: bool
) -> list[str]:
    """Planned instances whose running process would read a changed file; all of them when
    the shared template changed."""
    names = sorted(set(planned))
    if template_changed:
        return names
    touched = {instance_of_path(path) for path in changed_paths}
    return [name for name in names if name in touched]
