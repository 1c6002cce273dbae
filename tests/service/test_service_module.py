"""The lingbot_service module on a temp root: check mode, idempotence, errors, stale
instances, restarts, secrets, readiness."""

from __future__ import annotations

import copy
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import plan_support
import pytest
from module_support import SERVICE_CODE, FakeSystemd, node_arguments, run, tree

from lingbot_fleet.lingbot import layout, warmup
from lingbot_fleet.plan import build_plan

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="writes root-owned files")


def plan_of(profile: str, **policy: Any) -> dict[str, Any]:
    facts, probe = plan_support.lab_inputs(profile)
    return build_plan(facts, probe, policy)


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Any]:
    """A node root with numactl and a model; module arguments for it."""
    return node_arguments(tmp_path)


@pytest.fixture
def ready(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every instance answers at once; the list collects the instances checked."""
    checked: list[str] = []

    def answer(params: dict, instance: dict, state: dict) -> tuple[str, str]:
        checked.append(instance["name"])
        return "ready", ""

    monkeypatch.setattr(SERVICE_CODE, "readiness_once", answer)
    return checked


def converged(monkeypatch: pytest.MonkeyPatch, args: dict[str, Any]) -> FakeSystemd:
    systemd = FakeSystemd()
    first = run(monkeypatch, args, systemd)
    assert not first.failed, first.msg
    return systemd


# --- check mode and idempotence -----------------------------------------------------------


def test_check_mode_writes_nothing_and_says_what_it_would_do(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    done = run(
        monkeypatch, {**node, "plan": plan_of("h100-sxm-nvswitch")}, systemd, check_mode=True
    )
    assert not done.failed, done.msg
    assert tree(Path(node["root"])) == before
    assert systemd.mutating() == []
    assert done.result["changed"] is True
    assert done.result["started"] == ["numa0", "numa1"]
    assert done.result["enabled"] == ["numa0", "numa1"]
    assert done.result["readiness"] == {}
    assert ready == []
    assert "would create /etc/lingbot/numa1/config.yaml" in done.result["actions"]
    assert "would start lingbot@numa0.service, lingbot@numa1.service" in done.result["actions"]
    headers = [entry["after_header"] for entry in done.result["diff"]]
    assert "/etc/systemd/system/lingbot@numa1.service.d/10-lingbot-fleet-plan.conf" in headers


def test_first_call_writes_the_layout_and_the_second_changes_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    args = {**node, "plan": plan_of("h100-sxm-nvswitch")}
    systemd = FakeSystemd()
    first = run(monkeypatch, args, systemd)
    assert not first.failed, first.msg
    assert systemd.verbs() == [
        "daemon-reload",
        "enable -- lingbot@numa0.service lingbot@numa1.service",
        "start -- lingbot@numa0.service lingbot@numa1.service",
    ]
    assert first.result["readiness"]["numa1"]["ready"] is True
    files = tree(Path(node["root"]))
    assert files["/etc/lingbot"][1] == 0o755
    assert files["/etc/lingbot/numa0"][1] == 0o750
    assert files["/etc/lingbot/numa0/config.yaml"][1] == 0o640
    assert files["/etc/lingbot/numa0/config.yaml"][0].startswith(
        f"# {layout.MANAGED_HEADER}\n# Instance numa0 of /etc/lingbot/plan.json.\nhardware_profile:"
    )
    assert "/etc/lingbot/numa0/.lingbot-fleet-instance" in files
    assert "/etc/lingbot/numa0/secrets.env" not in files
    dropin = files["/etc/systemd/system/lingbot@numa1.service.d/10-lingbot-fleet-plan.conf"][0]
    assert "--cpunodebind=1 --membind=1" in dropin
    assert "--gpus 0,1,2,3 --peer-access-threshold 25 --host 127.0.0.1 --port 8001" in dropin
    assert json.loads(files["/etc/lingbot/plan.json"][0]) == args["plan"]
    # The warm-up: the program as the package holds it, run around every start.
    program = files[layout.WARM_UP_PROGRAM]
    assert program[1] == 0o755
    assert program[0] == Path(warmup.__file__).read_text()
    warm_gpus = f"{layout.WARM_UP_PROGRAM} gpus --peer-pairs 0:1,0:2,0:3,1:0,1:2,1:3,2:0,"
    bound = f"ExecStartPre={node['numactl']} --cpunodebind=1 --membind=1 {sys.executable} "
    assert bound + warm_gpus in dropin
    assert f"{layout.WARM_UP_PROGRAM} ready --host 127.0.0.1 --port 8001 --timeout-s 60" in dropin

    again = FakeSystemd(units=systemd.units)
    second = run(monkeypatch, args, again)
    assert not second.failed, second.msg
    assert second.result["changed"] is False
    assert second.result["actions"] == []
    assert again.mutating() == []
    assert tree(Path(node["root"])) == files
    assert sorted(second.result["readiness"]) == ["numa0", "numa1"]


def test_a_new_probe_timestamp_alone_leaves_plan_json_alone(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    plan = plan_of("a6000-phb")
    systemd = converged(monkeypatch, {**node, "plan": plan})
    newer = copy.deepcopy(plan)
    newer["inputs"]["probe_timestamp"] = "2031-01-01T00:00:00Z"
    done = run(monkeypatch, {**node, "plan": newer}, FakeSystemd(units=systemd.units))
    assert done.result["changed"] is False


# --- errors: nothing written --------------------------------------------------------------


def test_a_bad_override_fails_naming_it_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    done = run(
        monkeypatch,
        {
            **node,
            "plan": plan_of("a6000-phb"),
            "config_overrides": {"kv_cache_sync_interval_ms": "10ms", "colour": 1},
        },
        systemd,
    )
    assert done.failed
    assert done.msg == (
        "lingbot_service_config_overrides would make config.yaml invalid (nothing was written):\n"
        "- instance main: override kv_cache_sync_interval_ms: must be an integer, got str '10ms'\n"
        "- instance main: override colour: unknown key 'colour'; known keys here: "
        "hardware_profile, load_balancer, kv_cache_strategy, kv_cache_sync_interval_ms, "
        "kv_cache_compression, debug_mode"
    )
    assert done.result["problems"][0].startswith("instance main: override kv_cache_sync")
    assert done.result["changed"] is False
    assert tree(Path(node["root"])) == before
    assert systemd.calls == []


def test_a_missing_model_directory_fails_with_the_fix_and_writes_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    done = run(
        monkeypatch,
        {**node, "plan": plan_of("a6000-phb"), "model_path": "/srv/none"},
        FakeSystemd(),
    )
    assert done.failed
    assert done.msg == (
        "/srv/none/config.json does not exist: LingBot's --model-path must be a model "
        "directory (Hugging Face style, with config.json). Put the model there, or point "
        "lingbot_service_model_path at it; this role installs no model. Nothing was written."
    )
    assert tree(Path(node["root"])) == before


def test_a_unit_systemd_refuses_is_not_written(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    done = run(
        monkeypatch,
        {**node, "plan": plan_of("a6000-phb"), "start_limit_burst": -1},
        FakeSystemd(),
        check_mode=True,
    )
    assert done.failed
    assert done.msg.startswith(
        "systemd-analyze verify refused the LingBot units; nothing was written:"
    )
    assert "lingbot@.service:13: Failed to parse unsigned value, ignoring: -1" in done.msg
    assert tree(Path(node["root"])) == before


def test_a_bad_instance_name_is_refused(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    plan = plan_of("a6000-phb")
    plan["instances"][0]["name"] = "main/../x"
    done = run(monkeypatch, {**node, "plan": plan}, FakeSystemd())
    assert done.failed
    assert done.msg.startswith("instance name 'main/../x' cannot be a systemd instance")


# --- restarts -----------------------------------------------------------------------------


def test_only_the_instances_whose_files_changed_are_restarted(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    plan = plan_of("h100-sxm-nvswitch")
    systemd = converged(monkeypatch, {**node, "plan": plan})
    changed = copy.deepcopy(plan)
    changed["instances"][1]["config"]["kv_cache_sync_interval_ms"] = 20
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, {**node, "plan": changed}, again)
    assert not done.failed, done.msg
    assert done.result["restarted"] == ["numa1"]
    assert again.verbs() == ["restart -- lingbot@numa1.service"]
    assert done.result["daemon_reload"] is False


def test_a_template_change_restarts_every_instance_after_a_reload(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    args = {**node, "plan": plan_of("h100-sxm-nvswitch")}
    systemd = converged(monkeypatch, args)
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, {**args, "restart_delay_s": 9}, again)
    assert again.verbs() == [
        "daemon-reload",
        "restart -- lingbot@numa0.service lingbot@numa1.service",
    ]
    assert done.result["files"] == ["/etc/systemd/system/lingbot@.service"]


def test_a_failed_instance_is_reset_and_started(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    args = {**node, "plan": plan_of("a6000-phb")}
    systemd = converged(monkeypatch, args)
    systemd.units["lingbot@main.service"]["ActiveState"] = "failed"
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, args, again)
    assert again.verbs() == [
        "reset-failed -- lingbot@main.service",
        "start -- lingbot@main.service",
    ]
    assert done.result["started"] == ["main"]


# --- secrets ------------------------------------------------------------------------------


def test_the_api_key_is_quoted_kept_secret_and_removed_with_a_restart(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    key = 'k3y"quotes"$HOME`x`\\end'
    args = {**node, "plan": plan_of("a6000-phb"), "api_key": key}
    systemd = converged(monkeypatch, args)
    secrets = Path(node["root"]) / "etc" / "lingbot" / "main" / "secrets.env"
    assert (secrets.stat().st_mode & 0o777) == 0o600
    assert secrets.read_text().splitlines()[-1] == (
        'LINGBOT_API_KEY="k3y\\"quotes\\"\\$HOME\\`x\\`\\\\end"'
    )
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, {**args, "api_key": ""}, again)
    assert not secrets.exists()
    assert done.result["restarted"] == ["main"]
    assert key not in json.dumps(done.result)


def test_secrets_never_show_in_the_diff(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    done = run(
        monkeypatch,
        {**node, "plan": plan_of("a6000-phb"), "api_key": "s3cret"},
        FakeSystemd(),
        check_mode=True,
    )
    assert "s3cret" not in json.dumps(done.result)
    [entry] = [d for d in done.result["diff"] if d["after_header"].endswith("secrets.env")]
    assert entry["after"] == "(secret)\n"


# --- stale instances ----------------------------------------------------------------------


def test_stale_instances_go_and_other_directories_stay(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    root = Path(node["root"])
    systemd = converged(monkeypatch, {**node, "plan": plan_of("h100-sxm-nvswitch")})
    certs = root / "etc" / "lingbot" / "certs"
    certs.mkdir()
    (certs / "server.pem").write_text("pem\n")
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, {**node, "plan": plan_of("a6000-phb")}, again)
    assert not done.failed, done.msg
    assert done.result["removed_instances"] == ["numa0", "numa1"]
    assert "disable --now lingbot@numa0.service" in again.verbs()
    assert not (root / "etc" / "lingbot" / "numa0").exists()
    assert not (root / "etc" / "systemd" / "system" / "lingbot@numa1.service.d").exists()
    assert (certs / "server.pem").read_text() == "pem\n"
    assert (root / "etc" / "lingbot" / "main" / "config.yaml").exists()


def test_a_stale_directory_with_a_foreign_file_stops_the_run_before_any_change(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    root = Path(node["root"])
    systemd = converged(monkeypatch, {**node, "plan": plan_of("h100-sxm-nvswitch")})
    (root / "etc" / "lingbot" / "numa1" / "notes.txt").write_text("mine\n")
    before = tree(root)
    again = FakeSystemd(units=systemd.units)
    done = run(monkeypatch, {**node, "plan": plan_of("a6000-phb")}, again)
    assert done.failed
    assert done.msg.startswith(
        "/etc/lingbot/numa1 belongs to instance numa1, which the plan no longer has, but "
        "holds /etc/lingbot/numa1/notes.txt, which lingbot-fleet did not write."
    )
    assert tree(root) == before
    assert again.mutating() == []


# --- generations --------------------------------------------------------------------------


def test_every_change_is_recorded_in_the_run_generation(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    args = {**node, "plan": plan_of("a6000-phb"), "generation_run_id": "run-1"}
    done = run(monkeypatch, args, FakeSystemd())
    assert done.result["ansible_facts"] == {"lingbot_generation_pending": "run-1"}
    manifest = Path(node["root"]) / "var/lib/lingbot-fleet/generations/pending/run-1/manifest.json"
    recorded = {entry["path"] for entry in json.loads(manifest.read_text())["files"]}
    assert "/etc/lingbot/main/config.yaml" in recorded
    assert "/etc/systemd/system/lingbot@.service" in recorded


# --- readiness ----------------------------------------------------------------------------


class _Lingbot(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, text: str) -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200, 'lingbot_balancer_weight{gpu="gpu:0"} 1.0\n')

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self._send(200, json.dumps({"choices": [{"message": {"content": "LingBot"}}]}))


def test_an_instance_that_owns_its_port_and_answers_is_ready() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Lingbot)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        verdict = SERVICE_CODE.readiness_once(
            {"health_host": "127.0.0.1", "api_key": ""},
            {"name": "main", "port": port},
            {"ActiveState": "active", "MainPID": str(os.getpid())},
        )
    finally:
        server.shutdown()
        server.server_close()
    assert verdict == ("ready", "")


def test_a_port_held_by_another_process_is_not_this_instance() -> None:
    """Lab nodes share one network namespace: another node's LingBot on the same port
    answers every request, but it is not this instance."""
    other = subprocess.Popen(
        [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert other.stdout is not None
        port = int(other.stdout.readline().split(" port ")[1].split()[0])
        verdict, why = SERVICE_CODE.readiness_once(
            {"health_host": "127.0.0.1", "api_key": ""},
            {"name": "main", "port": port},
            {"ActiveState": "active", "MainPID": str(os.getpid())},
        )
    finally:
        other.terminate()
        other.wait()
    assert verdict == "foreign"
    assert why.startswith(f"port {port} is held by a process outside lingbot@main.service")


def test_nothing_listening_yet_means_wait() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    verdict, why = SERVICE_CODE.readiness_once(
        {"health_host": "127.0.0.1", "api_key": ""},
        {"name": "main", "port": port},
        {"ActiveState": "active", "MainPID": str(os.getpid())},
    )
    assert (verdict, why) == ("waiting", f"nothing listens on port {port} yet")


def test_an_instance_that_is_not_ready_fails_with_its_journal(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    monkeypatch.setattr(
        SERVICE_CODE,
        "readiness_once",
        lambda params, instance, state: ("waiting", "GET /metrics 503"),
    )
    monkeypatch.setattr(SERVICE_CODE, "POLL_INTERVAL_S", 0.01)
    done = run(
        monkeypatch,
        {**node, "plan": plan_of("a6000-phb"), "health_timeout_s": 0},
        FakeSystemd(),
    )
    assert done.failed
    assert done.msg.startswith(
        "lingbot@main.service is not ready on port 8000 after 0 s (limit 0 s): GET /metrics "
        "503. Its last journal lines follow; systemctl status lingbot@main.service shows more."
    )
    assert done.result["journal"] == ["lingbot: error: the journal line"]
    assert done.msg.endswith("lingbot: error: the journal line")


def test_a_failed_unit_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    systemd = FakeSystemd(
        units={"lingbot@main.service": {"ActiveState": "failed", "Result": "exit-code"}}
    )
    done = run(
        monkeypatch,
        {"plan": {"instances": [{"name": "main", "port": 8000}]}, "readiness_only": True},
        systemd,
    )
    assert done.failed
    assert "lingbot@main.service is failed (result exit-code)" in done.msg
    assert systemd.mutating() == [systemd.calls[-1]]  # journalctl only


def test_a_port_another_process_keeps_fails_the_instance(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        SERVICE_CODE,
        "readiness_once",
        lambda params, instance, state: ("foreign", "port 8000 is held by a process outside"),
    )
    monkeypatch.setattr(SERVICE_CODE, "FOREIGN_GRACE_S", 0.05)
    monkeypatch.setattr(SERVICE_CODE, "POLL_INTERVAL_S", 0.01)
    systemd = FakeSystemd(units={"lingbot@main.service": {"ActiveState": "active"}})
    done = run(
        monkeypatch,
        {"plan": {"instances": [{"name": "main", "port": 8000}]}, "readiness_only": True},
        systemd,
    )
    assert done.failed
    assert "is not ready on port 8000" in done.msg
    assert "port 8000 is held by a process outside" in done.msg


# --- planning on the node (plan_inputs) ---------------------------------------------------


def inputs_of(profile: str, **policy: Any) -> dict[str, Any]:
    """plan_inputs as the lingbot_service action gathers them for a lab profile."""
    facts, probe = plan_support.lab_inputs(profile)
    return {"facts": facts, "probe": probe, "policy": policy, "findings": []}


def with_pair_figure(inputs: dict[str, Any], figure: float) -> dict[str, Any]:
    """``inputs`` with the P2P figure of the pair 0-1 (both ways) measured as ``figure``."""
    inputs = copy.deepcopy(inputs)
    for pair in inputs["probe"]["pairs"]:
        if {pair["src"], pair["dst"]} == {0, 1}:
            pair["p2p_enabled"]["unidirectional_gbytes_per_s"] = figure
    return inputs


def plan_json(node: dict[str, Any]) -> dict[str, Any]:
    return json.loads((Path(node["root"]) / layout.PLAN_PATH.lstrip("/")).read_text())


def test_plan_inputs_plan_on_the_node_as_build_plan_does(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    inputs = inputs_of("h100-sxm-nvswitch", base_port=9000)
    done = run(monkeypatch, {**node, "plan_inputs": inputs}, FakeSystemd())
    assert not done.failed, done.msg
    # The layer count comes from the model's config.json on the node (32).
    expected = build_plan(
        inputs["facts"], inputs["probe"], {"base_port": 9000, "model_num_layers": 32}, [], None
    )
    assert done.result["plan"] == expected
    assert done.result["ansible_facts"]["lingbot_plan"] == expected
    assert done.result["model_layers_source"] == "/srv/model/config.json (num_hidden_layers)"
    assert done.result["instances"] == ["numa0", "numa1"]
    assert [i["port"] for i in expected["instances"]] == [9000, 9001]
    assert plan_json(node) == json.loads(layout.plan_text(expected))
    assert done.result["warnings"] == []


def test_plan_inputs_in_check_mode_plan_show_the_diff_and_write_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    inputs = inputs_of("a6000-phb")
    done = run(monkeypatch, {**node, "plan_inputs": inputs}, systemd, check_mode=True)
    assert not done.failed, done.msg
    assert tree(Path(node["root"])) == before
    assert systemd.mutating() == []
    expected = build_plan(inputs["facts"], inputs["probe"], {"model_num_layers": 32})
    assert done.result["ansible_facts"]["lingbot_plan"] == expected
    assert done.result["changed"] is True
    headers = [entry["after_header"] for entry in done.result["diff"]]
    assert layout.PLAN_PATH in headers
    assert "/etc/lingbot/main/config.yaml" in headers


def test_plan_inputs_keep_the_deployed_decisions_within_the_hysteresis_band(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    inputs = inputs_of("a6000-phb")
    systemd = converged(monkeypatch, {**node, "plan_inputs": inputs})
    deployed = plan_json(node)
    assert [i["gpus"] for i in deployed["instances"]] == [[0, 1]]
    # 24 GB/s is below the threshold (25) but within its 5% band around the pair in use.
    noisy = with_pair_figure(inputs, 24.0)
    done = run(monkeypatch, {**node, "plan_inputs": noisy}, FakeSystemd(units=systemd.units))
    assert not done.failed, done.msg
    policy = {"model_num_layers": 32}
    assert done.result["plan"] == build_plan(noisy["facts"], noisy["probe"], policy, [], deployed)
    assert [i["gpus"] for i in done.result["plan"]["instances"]] == [[0, 1]]
    without_plan_in_force = build_plan(noisy["facts"], noisy["probe"], policy)
    assert [i["gpus"] for i in without_plan_in_force["instances"]] == [[0], [1]]
    assert done.result["removed_instances"] == []


def test_plan_inputs_with_a_bad_override_fail_and_write_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    args = {**node, "plan_inputs": inputs_of("a6000-phb"), "config_overrides": {"colour": 1}}
    done = run(monkeypatch, args, systemd)
    assert done.failed
    assert done.msg == (
        "lingbot_service_config_overrides would make config.yaml invalid (nothing was written):\n"
        "- instance main: override colour: unknown key 'colour'; known keys here: "
        "hardware_profile, load_balancer, kv_cache_strategy, kv_cache_sync_interval_ms, "
        "kv_cache_compression, debug_mode"
    )
    assert done.result["plan"]["instances"][0]["name"] == "main"
    assert "ansible_facts" not in done.result
    assert tree(Path(node["root"])) == before
    assert systemd.calls == []


def test_plan_inputs_with_an_unknown_layer_count_fail_and_write_nothing(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    (Path(node["root"]) / "srv" / "model" / "config.json").write_text("{}\n")
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    done = run(monkeypatch, {**node, "plan_inputs": inputs_of("a6000-phb")}, systemd)
    assert done.failed
    assert done.msg == (
        "/srv/model/config.json has no num_hidden_layers (nor text_config.num_hidden_layers), "
        "so the planner cannot spread the decoder layers over the GPUs; set "
        "lingbot_service_model_num_layers to the model's decoder layer count. Nothing was "
        "written."
    )
    assert tree(Path(node["root"])) == before
    assert systemd.calls == []
    # The inventory's layer count is the fallback.
    inputs = inputs_of("a6000-phb", model_num_layers=12)
    done = run(monkeypatch, {**node, "plan_inputs": inputs}, FakeSystemd())
    assert not done.failed, done.msg
    assert done.result["plan"]["policy"]["model_num_layers"] == 12
    assert done.result["model_layers_source"] == "lingbot_service_model_num_layers"


def test_plan_inputs_without_an_eligible_gpu_fail_or_leave_the_node_alone(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    inputs = inputs_of("a6000-phb", exclude_gpus=[0, 1])
    expected = build_plan(
        inputs["facts"], inputs["probe"], {**inputs["policy"], "model_num_layers": 32}
    )
    assert expected["instances"] == []
    before = tree(Path(node["root"]))
    systemd = FakeSystemd()
    done = run(monkeypatch, {**node, "plan_inputs": inputs}, systemd)
    assert done.failed
    assert done.msg == (
        f"{expected['summary']} {expected['mode_reason']} Fix the findings, or set "
        "lingbot_service_fail_without_instances=false to leave this node's LingBot as it is."
    )
    args = {**node, "plan_inputs": inputs, "fail_without_instances": False}
    done = run(monkeypatch, args, systemd)
    assert not done.failed, done.msg
    assert done.result["changed"] is False
    assert done.result["instances"] == []
    assert done.result["ansible_facts"] == {"lingbot_plan": expected}
    assert tree(Path(node["root"])) == before
    assert systemd.calls == []


def test_plan_inputs_warn_of_idle_gpus(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    done = run(
        monkeypatch,
        {**node, "plan_inputs": inputs_of("h100-sxm-nvswitch", max_instances=1)},
        FakeSystemd(),
        check_mode=True,
    )
    assert not done.failed, done.msg
    [finding] = done.result["plan"]["findings"]
    assert finding["code"] == "PLAN_GPUS_IDLE"
    assert done.result["warnings"] == [
        f"PLAN_GPUS_IDLE: {finding['message']}; fix: {finding['fix']}"
    ]


def test_plan_inputs_a_policy_the_planner_refuses_fails_before_any_change(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any], ready: list[str]
) -> None:
    systemd = FakeSystemd()
    inputs = inputs_of("a6000-phb", p2p_min_gbytes_per_s=-1)
    done = run(monkeypatch, {**node, "plan_inputs": inputs}, systemd)
    assert done.failed
    assert done.msg == (
        "cannot plan LingBot for this host: policy p2p_min_gbytes_per_s: must be > 0, got -1"
    )
    assert systemd.calls == []


def test_plan_and_plan_inputs_are_mutually_exclusive(
    monkeypatch: pytest.MonkeyPatch, node: dict[str, Any]
) -> None:
    args = {**node, "plan": plan_of("a6000-phb"), "plan_inputs": inputs_of("a6000-phb")}
    done = run(monkeypatch, args, FakeSystemd())
    assert done.failed
    assert done.msg == "parameters are mutually exclusive: plan|plan_inputs"
