"""Response times follow the deployment: the latency model, and the stand-in timing its
GPU paths through the lab's libcuda on its first request and answering in the modelled
time; that first request carries the driver's first-use costs.

The driver-backed tests run the stand-in against a node tree computed from a lab profile
(lab/node's hwstate), with the lab's libnvidia-ml and libcuda from lab/native/build."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from facts_support import cuda_library
from native_support import profile_state
from test_standin_serving import chat_body, samples

REPO_ROOT = Path(__file__).resolve().parents[2]
STANDIN_ROOT = REPO_ROOT / "lab" / "lingbot_standin"
LAB_NODE_DIR = REPO_ROOT / "lab" / "node"
for import_root in (STANDIN_ROOT, LAB_NODE_DIR):
    if str(import_root) not in sys.path:
        sys.path.insert(0, str(import_root))

from lingbot.latency import (  # noqa: E402
    PATH_HOST_STAGED,
    PATH_PEER,
    LatencyModel,
    MeasuredPath,
    ring_pairs,
)

# Requests are timed against the model within a round-trip allowance: run alone.
pytestmark = pytest.mark.wall_clock

ONE_GPU_S = 0.382
PHB_PAIR_S = 0.217
CROSS_SOCKET_PAIR_S = 0.496
CALIBRATION_TOLERANCE = 0.05
ONE_TOKEN_LIMIT_S = 0.030
# What a loaded test machine adds to a request on top of the modelled time.
HTTP_ROUND_TRIP_ALLOWANCE_S = 0.15
NOISE_SEED = "1"
# Claimed in config.yaml as the toolkit would write it (Gbit/s): above the threshold.
CLAIMED_BANDWIDTH_GBITS_PER_S = 227.2
PROMPT_128_TOKENS = " ".join(f"word{index}" for index in range(128))
READINESS_PROMPT = "lingbot-fleet readiness"

# Figures of lab/profiles (p2p and host_staged of the pair).
PHB_P2P = (28.4, 1320.0)
PHB_HOST_STAGED = (12.8, 8800.0)
CROSS_SOCKET_P2P = (11.2, 2400.0)
NOACPI_HOST_STAGED = (11.9, 9100.0)
NVLINK_P2P = (370.0, 2250.0)


def pair_model(kind: str, figures: tuple[float, float], gpu_count: int = 2) -> LatencyModel:
    devices = [f"gpu:{ordinal}" for ordinal in range(gpu_count)]
    paths = tuple(
        MeasuredPath(source, target, kind, figures[0], figures[1])
        for source, target in ring_pairs(devices)
    )
    return LatencyModel(gpu_count, paths)


def assert_near(measured_s: float, expected_s: float) -> None:
    assert abs(measured_s - expected_s) <= CALIBRATION_TOLERANCE * expected_s, (
        f"{measured_s * 1000:.1f} ms is not within 5% of {expected_s * 1000:.0f} ms"
    )


# ---- the model ------------------------------------------------------------------------


def test_model_reproduces_the_calibration_points():
    assert_near(LatencyModel(1).reference_request_s(), ONE_GPU_S)
    assert_near(pair_model(PATH_PEER, PHB_P2P).reference_request_s(), PHB_PAIR_S)
    assert_near(pair_model(PATH_PEER, CROSS_SOCKET_P2P).reference_request_s(), CROSS_SOCKET_PAIR_S)


@pytest.mark.parametrize("figures", [PHB_HOST_STAGED, NOACPI_HOST_STAGED])
def test_host_staged_pair_is_slower_than_one_gpu(figures):
    host_staged_s = pair_model(PATH_HOST_STAGED, figures).reference_request_s()
    assert host_staged_s > LatencyModel(1).reference_request_s()
    assert host_staged_s > pair_model(PATH_PEER, PHB_P2P).reference_request_s()


def test_a_fast_link_halves_the_compute():
    assert pair_model(PATH_PEER, NVLINK_P2P).reference_request_s() == pytest.approx(
        ONE_GPU_S / 2, rel=CALIBRATION_TOLERANCE
    )


def test_slowest_link_of_the_ring_paces_it():
    fast = MeasuredPath("gpu:0", "gpu:1", PATH_PEER, *PHB_P2P)
    slow = MeasuredPath("gpu:1", "gpu:0", PATH_HOST_STAGED, *PHB_HOST_STAGED)
    mixed = LatencyModel(2, (fast, slow))
    assert (
        mixed.reference_request_s()
        == pair_model(PATH_HOST_STAGED, PHB_HOST_STAGED).reference_request_s()
    )


@pytest.mark.parametrize(
    "model",
    [
        LatencyModel(1),
        pair_model(PATH_PEER, PHB_P2P),
        pair_model(PATH_PEER, CROSS_SOCKET_P2P),
        pair_model(PATH_HOST_STAGED, NOACPI_HOST_STAGED),
        pair_model(PATH_PEER, PHB_P2P, gpu_count=4),
    ],
)
def test_one_token_readiness_request_is_cheap(model):
    assert model.request_s(len(READINESS_PROMPT.split()), 1) < ONE_TOKEN_LIMIT_S


def test_time_grows_with_prompt_and_generated_tokens():
    model = pair_model(PATH_PEER, PHB_P2P)
    assert model.request_s(256, 13) > model.request_s(128, 13) > model.request_s(128, 1)


def test_multi_gpu_model_needs_its_paths():
    with pytest.raises(ValueError):
        LatencyModel(2)
    with pytest.raises(ValueError):
        LatencyModel(2, (MeasuredPath("gpu:0", "gpu:1", PATH_PEER, 0.0, 1000.0),))


# ---- through the lab's driver ----------------------------------------------------------


@pytest.fixture(scope="session")
def lab_libraries() -> Path:
    """The lab's libnvidia-ml.so.1 and libcuda.so.1 (built when missing)."""
    return cuda_library().parent


def lab_config(state: dict, gpu_count: int) -> str:
    """config.yaml (JSON form) for the first gpu_count GPUs, peer links as claimed."""
    gpus = state["gpus"][:gpu_count]
    topology = [
        {
            "gpu_id": gpu["index"],
            "bus_id": gpu["bdf"],
            "peer_links": [
                {
                    "target_gpu_id": peer["index"],
                    "path_type": "PHB",
                    "bandwidth_gbps": CLAIMED_BANDWIDTH_GBITS_PER_S,
                    "latency_ns": 132,
                }
                for peer in gpus
                if peer is not gpu
            ],
        }
        for gpu in gpus
    ]
    config = {
        "hardware_profile": {"gpu_topology": topology, "p2p_threshold_gbps": 200.0},
        "load_balancer": {"type": "round_robin", "config": {"gpu_weights": {}}},
        "debug_mode": False,
    }
    return json.dumps(config, indent=2)


@pytest.fixture
def lab_node(fake_node, lab_libraries):
    """Turns the fake node into a lab node of a profile; returns its state."""

    def boot(name: str, gpu_count: int, numa_node: int | None = None) -> dict:
        state, state_text = profile_state(name)
        run_dir = fake_node.root / "run" / "lingbot-lab"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "state.txt").write_text(state_text, encoding="utf-8")
        for gpu in state["gpus"]:
            node = gpu["numa_node"] if numa_node is None else numa_node
            fake_node.set_numa_node(gpu["bdf"], node)
        fake_node.env.update(
            {
                "LINGBOT_LAB_ROOT": str(fake_node.root),
                "LINGBOT_NVML_LIBRARY": str(lab_libraries / "libnvidia-ml.so.1"),
                "LINGBOT_CUDA_LIBRARY": str(lab_libraries / "libcuda.so.1"),
                "LINGBOT_LAB_NOISE_SEED": NOISE_SEED,
            }
        )
        fake_node.write_config(lab_config(state, gpu_count))
        return state

    return boot


def timed_chat_s(server, content: str, **extra: object) -> float:
    started = time.monotonic()
    status, text = server.post("/v1/chat/completions", chat_body(content, **extra))
    elapsed_s = time.monotonic() - started
    assert status == 200, text
    return elapsed_s


def one_token_s(server) -> float:
    return timed_chat_s(server, READINESS_PROMPT, max_tokens=1)


def modelled_reference_s(server) -> float:
    """The model's time for the reference request, once a first request brought CUDA up."""
    one_token_s(server)
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_latency_model_active", ())] == 1
    key = (
        "lingbot_modelled_request_seconds",
        (("completion_tokens", "13"), ("prompt_tokens", "128")),
    )
    return metrics[key]


def served_reference_s(server) -> float:
    """The modelled time of a 128-token request, after checking that such requests
    take it (and no more than the HTTP round trip on top)."""
    modelled_s = modelled_reference_s(server)
    for _ in range(3):
        elapsed_s = timed_chat_s(server, PROMPT_128_TOKENS)
        assert modelled_s <= elapsed_s <= modelled_s + HTTP_ROUND_TRIP_ALLOWANCE_S
    return modelled_s


@pytest.mark.native
def test_one_gpu_answers_in_the_calibrated_time(lab_node, fake_node, start_server):
    lab_node("a6000-phb", gpu_count=1)
    server = start_server(fake_node.base_args("0"))
    assert_near(served_reference_s(server), ONE_GPU_S)
    assert one_token_s(server) < ONE_TOKEN_LIMIT_S + HTTP_ROUND_TRIP_ALLOWANCE_S


@pytest.mark.native
def test_phb_pair_with_peer_access_answers_in_the_calibrated_time(
    lab_node, fake_node, start_server
):
    lab_node("a6000-phb", gpu_count=2)
    server = start_server(fake_node.base_args("0,1"))
    one_token_s(server)
    metrics = samples(server.get("/metrics")[1])
    for source, target in (("gpu:0", "gpu:1"), ("gpu:1", "gpu:0")):
        labels = (("dst", target), ("path", PATH_PEER), ("src", source))
        measured = metrics[("lingbot_peer_path_gbytes_per_s", labels)]
        assert measured == pytest.approx(PHB_P2P[0], rel=0.03)
        latency = metrics[("lingbot_peer_path_latency_ns", labels)]
        assert latency == pytest.approx(PHB_P2P[1], rel=0.1)
    assert_near(served_reference_s(server), PHB_PAIR_S)
    assert one_token_s(server) < ONE_TOKEN_LIMIT_S + HTTP_ROUND_TRIP_ALLOWANCE_S
    assert "measured gpu:0->gpu:1: p2p" in server.stderr()


@pytest.mark.native
def test_pair_without_peer_access_is_host_staged_and_slower_than_one_gpu(
    lab_node, fake_node, start_server
):
    # a6000-noacpi: the chipset does not support P2P (CNS); config.yaml still claims it.
    lab_node("a6000-noacpi", gpu_count=2)
    server = start_server(fake_node.base_args("0,1"))
    one_token_s(server)
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_peer_links_usable", ())] == 2
    labels = (("dst", "gpu:1"), ("path", PATH_HOST_STAGED), ("src", "gpu:0"))
    measured = metrics[("lingbot_peer_path_gbytes_per_s", labels)]
    assert measured == pytest.approx(NOACPI_HOST_STAGED[0], rel=0.03)
    assert served_reference_s(server) > ONE_GPU_S * (1 + CALIBRATION_TOLERANCE)
    assert "cuDeviceCanAccessPeer 0" in server.stderr()


@pytest.mark.native
def test_cross_socket_pair_through_the_driver_gives_its_calibration(lab_node, fake_node):
    # LingBot refuses to serve GPUs on two NUMA nodes, so the dual-socket pair's time is
    # the model fed with what the driver measures on that node.
    lab_node("a6000-dual-socket", gpu_count=2)
    refused = fake_node.run_to_exit(fake_node.base_args("0,1"))
    assert refused.returncode == 1
    assert "same NUMA node" in refused.stderr
    script = (
        "import json, logging\n"
        "from lingbot.latency import LatencyModel\n"
        "from lingbot.peerprobe import GpuSession, PairRequest\n"
        "session = GpuSession([0, 1], logging.getLogger('probe'))\n"
        "session.enable_peer_access('gpu:0', 'gpu:1', (0, 1))\n"
        "session.enable_peer_access('gpu:1', 'gpu:0', (1, 0))\n"
        "requests = [PairRequest('gpu:0', 'gpu:1', 0, 1), PairRequest('gpu:1', 'gpu:0', 1, 0)]\n"
        "paths = session.measure_paths(requests)\n"
        "model = LatencyModel(2, tuple(paths))\n"
        "print(json.dumps({'kinds': [path.kind for path in paths],"
        " 'gbytes_per_s': [path.gbytes_per_s for path in paths],"
        " 'reference_s': model.reference_request_s()}))\n"
    )
    result = subprocess.run(
        [*fake_node.command([])[:1], "-c", script],
        env=fake_node.env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["kinds"] == [PATH_PEER, PATH_PEER]
    assert answer["gbytes_per_s"] == pytest.approx([CROSS_SOCKET_P2P[0]] * 2, rel=0.03)
    assert_near(answer["reference_s"], CROSS_SOCKET_PAIR_S)


def test_without_a_driver_requests_are_answered_at_once(fake_node, start_server):
    server = start_server(fake_node.base_args())
    metrics = samples(server.get("/metrics")[1])
    assert metrics[("lingbot_latency_model_active", ())] == 0
    assert ("lingbot_peer_path_gbytes_per_s", ()) not in metrics
    assert timed_chat_s(server, PROMPT_128_TOKENS) < HTTP_ROUND_TRIP_ALLOWANCE_S
    assert "no latency model: cannot load" in server.stderr()


# lab/node/lingbot_lab/profile.py DEFAULT_DRIVER: what the lab's libcuda spends, per process.
GPU_INIT_S = 0.400
CONTEXT_CREATE_S = 0.150
PEER_MAPPING_S = 0.040


@pytest.mark.native
@pytest.mark.parametrize("persistence_on", [False, True])
def test_the_first_request_carries_the_drivers_first_use_costs(
    lab_node, fake_node, start_server, persistence_on
):
    lab_node("a6000-phb", gpu_count=2)
    persistence_dir = fake_node.root / "run" / "lingbot-lab" / "persistence"
    persistence_dir.mkdir(parents=True, exist_ok=True)
    for index in (0, 1):
        (persistence_dir / str(index)).write_text("1\n" if persistence_on else "0\n")
    server = start_server(fake_node.base_args("0,1"))
    first_s = one_token_s(server)
    later_s = [one_token_s(server) for _ in range(9)]
    # Two contexts (each bringing its GPU up unless it is in persistence mode), two mappings.
    startup_s = 2 * CONTEXT_CREATE_S + 2 * PEER_MAPPING_S
    if not persistence_on:
        startup_s += 2 * GPU_INIT_S
    assert first_s >= startup_s
    assert max(later_s) < ONE_TOKEN_LIMIT_S + HTTP_ROUND_TRIP_ALLOWANCE_S
    if persistence_on:
        assert first_s < startup_s + 2 * GPU_INIT_S
    log = server.stderr()
    assert "CUDA context on GPU ordinal 0 in " in log
    assert "peer access gpu:0->gpu:1 enabled in " in log
    assert "CUDA up on gpu:0,gpu:1 in " in log
