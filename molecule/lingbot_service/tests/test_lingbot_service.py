"""Every instance of the plan in force runs as planned: its unit enabled and running, its
GPUs by UUID in plan order, bound with numactl to the NUMA node those GPUs sit on, its
units accepted by systemd-analyze, and it serves on its port."""

from __future__ import annotations

import json

import pytest

PLAN = "/etc/lingbot/plan.json"
SERVE_CHECK = """
import json, sys, urllib.request
port = int(sys.argv[1])
with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
    assert answer.status == 200
body = json.dumps({"max_tokens": 4, "messages": [{"role": "user", "content": "ping"}]}).encode()
request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                 headers={"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as answer:
    assert answer.status == 200
    print(len(json.load(answer)["choices"]))
"""


@pytest.fixture(scope="module")
def instances(host) -> list[dict]:
    plan = json.loads(host.file(PLAN).content_string)
    assert plan["instances"], plan.get("summary")
    return plan["instances"]


def main_pid(host, instance: dict) -> int:
    unit = f"lingbot@{instance['name']}.service"
    pid = int(host.check_output(f"systemctl show -p MainPID --value {unit}"))
    assert pid > 0, f"{unit} has no main process"
    return pid


def test_each_instance_unit_is_enabled_and_running(host, instances):
    for instance in instances:
        service = host.service(f"lingbot@{instance['name']}")
        assert service.is_enabled
        assert service.is_running


def test_each_instance_sees_its_gpus_by_uuid_in_plan_order(host, instances):
    for instance in instances:
        environ = host.check_output(f"tr '\\0' '\\n' < /proc/{main_pid(host, instance)}/environ")
        variables = dict(line.split("=", 1) for line in environ.splitlines() if "=" in line)
        assert variables["CUDA_VISIBLE_DEVICES"] == ",".join(instance["gpu_uuids"])
        assert variables["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_each_instance_is_bound_to_the_numa_node_of_its_gpus(host, instances):
    for instance in instances:
        nodes = {
            int(host.file(f"/sys/bus/pci/devices/{bus_id}/numa_node").content_string)
            for bus_id in instance["bus_ids"]
        }
        assert nodes == {instance["numa_node"]}
        node = instance["numa_node"]
        exec_start = host.check_output(
            f"systemctl show -p ExecStart --value lingbot@{instance['name']}.service"
        )
        assert f"numactl --cpunodebind={node} --membind={node} " in exec_start
        assert f"--port {instance['port']} " in exec_start + " "


def test_systemd_analyze_accepts_the_units(host, instances):
    for instance in instances:
        verify = host.run(f"systemd-analyze verify lingbot@{instance['name']}.service")
        assert verify.rc == 0, verify.stderr


def test_each_instance_serves_on_its_port(host, instances):
    host.run_test("cat > /root/serve_check.py << 'EOF'\n" + SERVE_CHECK + "EOF")
    for instance in instances:
        answer = host.run(f"python3 /root/serve_check.py {instance['port']}")
        assert answer.rc == 0, answer.stderr
        assert int(answer.stdout) >= 1, answer.stdout


def test_config_files_are_not_readable_by_everyone(host, instances):
    for instance in instances:
        config = host.file(f"/etc/lingbot/{instance['name']}/config.yaml")
        assert config.user == "root"
        assert config.group == "lingbot"
        assert config.mode == 0o640
