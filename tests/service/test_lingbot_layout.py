"""lingbot_fleet.lingbot.layout: paths, the command line (built, parsed, accepted by the
stand-in LingBot), unit files, secrets quoting, what a node has."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path
from typing import Any

import plan_support
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lingbot.cli import build_parser
from lingbot_fleet.lingbot import layout
from lingbot_fleet.plan import build_plan

LAUNCH = layout.Launch(
    numactl="/usr/bin/numactl",
    python="/usr/bin/python3",
    model_path="/var/lib/lingbot/model",
    extra_args=("--batch-size", "8", "--offload-kv"),
)


def instance_of(profile: str, position: int = 0) -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs(profile)
    return build_plan(facts, probe, {})["instances"][position]


def test_paths_and_names() -> None:
    assert layout.PLAN_PATH == "/etc/lingbot/plan.json"
    assert layout.config_path("numa1") == "/etc/lingbot/numa1/config.yaml"
    assert layout.secrets_path("numa1") == "/etc/lingbot/numa1/secrets.env"
    assert layout.unit_name("numa1") == "lingbot@numa1.service"
    assert layout.instance_of_unit("lingbot@numa1.service") == "numa1"
    assert layout.instance_of_unit("lingbot@.service") is None
    assert layout.dropin_path("numa1") == (
        "/etc/systemd/system/lingbot@numa1.service.d/10-lingbot-fleet-plan.conf"
    )
    assert layout.instance_of_path("/etc/lingbot/numa1/config.yaml") == "numa1"
    assert layout.instance_of_path("/etc/lingbot/numa1/secrets.env") == "numa1"
    assert layout.instance_of_path(layout.dropin_path("main")) == "main"
    assert layout.instance_of_path("/etc/lingbot/numa1/.lingbot-fleet-instance") is None
    assert layout.instance_of_path("/etc/lingbot/plan.json") is None
    assert layout.instance_of_path(layout.template_path()) is None


@pytest.mark.parametrize("name", ["", "a/b", "-x", "..", "x" * 65, "a b"])
def test_names_systemd_cannot_use_are_refused(name: str) -> None:
    with pytest.raises(layout.LayoutError, match="cannot be a systemd instance"):
        layout.check_instance_name(name)


PHB_DROPIN = """\
# managed
# Instance main of the plan (/etc/lingbot/plan.json): GPU 0, 1 (NVML indices, primary first) \
on NUMA node 0.
# CUDA_VISIBLE_DEVICES lists their UUIDs in that order, so --gpus 0,1 keeps it.
[Service]
Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID
Environment=CUDA_VISIBLE_DEVICES=GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11,\
GPU-11540733-53c6-4b27-9b89-a46dfe945aec
ExecStart=
ExecStart=/usr/bin/numactl --cpunodebind=0 --membind=0 /usr/bin/python3 -m lingbot --config \
/etc/lingbot/main/config.yaml --model-path /var/lib/lingbot/model --gpus 0,1 \
--peer-access-threshold 25 --host 127.0.0.1 --port 8000 --batch-size 8 --offload-kv
# Warm-up: contexts and peer mappings on the GPUs first; then the unit stays
# activating until LingBot answers one-token chat completions in steady time.
TimeoutStartSec=90
ExecStartPre=
ExecStartPre=/usr/bin/numactl --cpunodebind=0 --membind=0 /usr/bin/python3 \
/usr/local/libexec/lingbot-fleet/lingbot-warm-up gpus --peer-pairs 0:1,1:0
ExecStartPost=
ExecStartPost=/usr/bin/python3 /usr/local/libexec/lingbot-fleet/lingbot-warm-up ready \
--host 127.0.0.1 --port 8000 --timeout-s 60
"""


def test_the_phb_dropin_is_written_as_expected() -> None:
    assert layout.dropin_text(instance_of("a6000-phb"), LAUNCH, "managed") == PHB_DROPIN


def test_without_warm_up_the_dropin_starts_lingbot_only() -> None:
    launch = dataclasses.replace(LAUNCH, warm_up=False)
    text = layout.dropin_text(instance_of("a6000-phb"), launch, "managed")
    assert text == PHB_DROPIN.split("# Warm-up:", maxsplit=1)[0]
    assert "ExecStartPre" not in text and "TimeoutStartSec" not in text


def test_only_pairs_at_or_above_the_threshold_are_warmed() -> None:
    instance = instance_of("a6000-phb")
    assert layout.warm_up_peer_pairs(instance) == [(0, 1), (1, 0)]
    slow = dict(instance, peer_access_threshold_gbytes_per_s=1000.0)
    assert layout.warm_up_peer_pairs(slow) == []
    single = dict(instance, peer_access=False)
    assert layout.warm_up_peer_pairs(single) == []


def test_exec_start_parses_back_from_the_dropin() -> None:
    value = layout.exec_start_value(["[Service]\nExecStart=/bin/false\n", PHB_DROPIN])
    assert value is not None
    parsed = layout.parse_exec_start(value)
    assert parsed == layout.exec_start(instance_of("a6000-phb"), LAUNCH)
    assert (parsed.cpunodebind, parsed.membind) == ("0", "0")
    assert parsed.entry == ("-m", "lingbot")
    assert parsed.gpus == (0, 1)
    assert parsed.port == 8000
    assert parsed.value(layout.Flag.HOST) == "127.0.0.1"
    assert parsed.has(layout.Flag.OFFLOAD_KV)


def test_the_single_gpu_form_is_built_from_a_parsed_command() -> None:
    parsed = layout.parse_exec_start(layout.exec_start(instance_of("a6000-phb"), LAUNCH).argv())
    single = parsed.replaced(layout.Flag.DEVICE, "gpu:0", drop=[layout.Flag.GPUS]).without(
        layout.Flag.PEER_ACCESS_THRESHOLD
    )
    assert single.gpus == (0,)
    assert "--device gpu:0 --host 127.0.0.1 --port 8000" in single.text()
    assert "--gpus" not in single.text()


@pytest.mark.parametrize(("profile", "position"), [("a6000-phb", 0), ("h100-sxm-nvswitch", 1)])
def test_the_stand_in_lingbot_accepts_the_command_line(profile: str, position: int) -> None:
    argv = layout.exec_start(instance_of(profile, position), LAUNCH).argv()
    options = argv[argv.index("--config") :]
    parsed = build_parser().parse_args(options)
    assert parsed.host == "127.0.0.1"
    assert parsed.port == 8000 + position
    assert parsed.batch_size == 8
    assert parsed.offload_kv is True


def test_a_command_line_the_role_did_not_write_is_refused() -> None:
    with pytest.raises(layout.LayoutError, match="does not start with numactl"):
        layout.parse_exec_start("/usr/bin/python3 -m lingbot --config /x --gpus 0")
    with pytest.raises(layout.LayoutError, match="has no --config"):
        layout.parse_exec_start("/usr/bin/numactl --cpunodebind=0 --membind=0 /usr/bin/python3")


words = st.lists(
    st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp"))), min_size=1
)


@given(words)
def test_systemd_words_read_back(argv: list[str]) -> None:
    text = " ".join(layout.systemd_word(word) for word in argv)
    assert layout.split_systemd_words(text) == argv


def test_systemd_reads_the_words_as_written(tmp_path: Path) -> None:
    """systemd-analyze parses an ExecStart with the words we quote the way we read them."""
    tricky = ["/bin/echo", "a b", 'say "hi"', "50%", "$HOME", "back\\slash", "semi;colon"]
    unit = tmp_path / "words.service"
    command = " ".join(layout.systemd_word(word) for word in tricky)
    unit.write_text(f"[Service]\nType=oneshot\nExecStart={command}\n")
    done = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert layout.split_systemd_words(command) == tricky


def test_the_template_holds_what_every_instance_shares() -> None:
    text = layout.template_text(
        layout.UnitSettings(pythonpath="/opt/lingbot", device_groups=("video", "render")),
        "managed",
    )
    lines = text.splitlines()
    assert lines[0] == "# managed"
    for line in (
        "Documentation=file:///etc/lingbot/plan.json",
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target nvidia-persistenced.service",
        "AssertPathIsDirectory=/var/lib/lingbot/model",
        "StartLimitIntervalSec=300",
        "StartLimitBurst=5",
        "User=lingbot",
        "SupplementaryGroups=video render",
        "Environment=PYTHONPATH=/opt/lingbot",
        "EnvironmentFile=-/etc/lingbot/%i/secrets.env",
        "Restart=on-failure",
        "RestartPreventExitStatus=2",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DeviceAllow=char-nvidia-frontend rw",
        "DeviceAllow=char-nvidia-uvm rw",
        "LimitMEMLOCK=infinity",
        "WantedBy=multi-user.target",
    ):
        assert line in lines
    plain = layout.template_text(layout.UnitSettings(hardening=False, device_groups=()))
    assert "NoNewPrivileges=yes" not in plain
    assert "SupplementaryGroups" not in plain


@pytest.mark.parametrize(
    ("value", "written"),
    [
        ("plain", '"plain"'),
        ("with space", '"with space"'),
        ('q"uote', '"q\\"uote"'),
        ("$HOME", '"\\$HOME"'),
        ("back\\slash", '"back\\\\slash"'),
        ("tick`s", '"tick\\`s"'),
        ("single'quote", '"single\'quote"'),
    ],
)
def test_env_file_values_are_quoted(value: str, written: str) -> None:
    assert layout.env_file_value(value) == written


def test_an_env_file_value_with_a_newline_is_refused() -> None:
    with pytest.raises(layout.LayoutError, match="newline"):
        layout.env_file_value("a\nLD_PRELOAD=/tmp/x.so")


def test_plans_that_differ_only_in_the_probe_timestamp_are_the_same() -> None:
    facts, probe = plan_support.lab_inputs("a6000-phb")
    plan = build_plan(facts, probe, {})
    newer = {**plan, "inputs": {**plan["inputs"], "probe_timestamp": "2031-01-01T00:00:00Z"}}
    assert layout.same_plan(layout.plan_text(plan), newer)
    assert not layout.same_plan(layout.plan_text(plan), {**plan, "summary": "other"})
    assert not layout.same_plan(None, plan)
    assert not layout.same_plan("{not json", plan)


def write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_present_instances_tell_the_toolkits_from_the_rest(tmp_path: Path) -> None:
    etc = tmp_path / "etc" / "lingbot"
    units = tmp_path / "etc" / "systemd" / "system"
    write(etc / "main" / layout.MARKER_NAME)
    write(etc / "main" / "config.yaml")
    write(etc / "old" / "config.yaml", f"# {layout.MANAGED_HEADER}\nhardware_profile: {{}}\n")
    write(etc / "certs" / "server.pem")
    write(etc / "plan.json", "{}\n")
    write(units / "lingbot@old.service.d" / layout.DROPIN_NAME, "[Service]\n")
    write(units / "lingbot@theirs.service.d" / "override.conf", "[Service]\n")
    (units / "multi-user.target.wants").mkdir()
    (units / "multi-user.target.wants" / "lingbot@gone.service").symlink_to("/nonexistent")
    (units / "multi-user.target.wants" / "lingbot@theirs.service").symlink_to("/nonexistent")
    present = layout.present_instances(str(tmp_path))
    assert sorted(present) == ["certs", "gone", "main", "old", "theirs"]
    assert present["old"].toolkit_dir and present["old"].dropin
    assert not present["certs"].ours
    assert not present["theirs"].ours
    assert present["gone"].ours
    stale = layout.stale_instances(present, ["main"])
    assert [instance.name for instance in stale] == ["gone", "old"]
    assert present["old"].dir_files == ["/etc/lingbot/old/config.yaml"]


def test_restarts_follow_the_files_each_instance_reads() -> None:
    changed = [
        "/etc/lingbot/plan.json",
        "/etc/lingbot/numa1/config.yaml",
        "/etc/lingbot/numa0/.lingbot-fleet-instance",
    ]
    assert layout.instances_to_restart(changed, ["numa0", "numa1"], False) == ["numa1"]
    assert layout.instances_to_restart([], ["numa1", "numa0"], True) == ["numa0", "numa1"]
    assert layout.instances_to_restart([layout.dropin_path("numa0")], ["numa0"], False) == ["numa0"]


@pytest.mark.parametrize("word", ["a\nb", "a\rb", "tab\there", "nel\x85", "ls\u2028x", "nul\x00"])
def test_a_word_with_a_control_character_has_no_safe_form(word: str) -> None:
    with pytest.raises(layout.SystemdTextError, match="holds the control character"):
        layout.systemd_word(word)
    with pytest.raises(layout.LayoutError, match=r"^ExecStart: .* start a new directive"):
        layout.command_text(["/usr/bin/python3", word])
