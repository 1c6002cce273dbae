"""The stand-in sees only the GPUs CUDA_VISIBLE_DEVICES gives it, as a CUDA program does.

The fake node's driver is nvidia-smi here (its NVML does not load); a lost GPU's row is
nvidia-smi's "Unable to determine the device handle" line and it exits 15.
"""

from __future__ import annotations

import pytest

UUID_0 = "GPU-3b5d6f1e-8a2c-4e7b-9d10-2f4a6c8e0b11"
UUID_1 = "GPU-7c1e2a90-4b3d-4f6e-8a21-5d9c0e7f3a22"
UUID_2 = "GPU-a94c0d3b-2e51-4c8f-b6d7-0e3f9a1c5b33"
ROW_0 = f"0, {UUID_0}, 00000000:81:00.0"
ROW_1 = f"1, {UUID_1}, 00000000:C1:00.0"
LOST_ROW_1 = "Unable to determine the device handle for GPU0000:C1:00.0: Unknown Error"
LOST_1 = "driver index 1 at 0000:c1:00.0"
REASON = "(nvidia-smi: Unknown Error)"
LOST_1_IN_USE = f"{LOST_1}, which the driver reports lost {REASON}"
DEVICE_UNAVAILABLE = "RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable"


def single_gpu_0(fake_node, good_config) -> list[str]:
    """config.yaml and arguments for LingBot on CUDA device 0 alone."""
    fake_node.write_config(
        good_config.replace('"layers.*": "gpu:1"', '"layers.*": "gpu:0"').replace(
            ', "gpu:1": 0.85}', "}"
        )
    )
    args = fake_node.base_args()
    args[args.index("--gpus") : args.index("--gpus") + 2] = ["--device", "gpu:0"]
    return args


def last_lines(fake_node, args: list[str]) -> tuple[int, list[str]]:
    result = fake_node.run_to_exit(args)
    assert result.stdout == "", "nothing is announced on stdout when refused"
    return result.returncode, result.stderr.rstrip().splitlines()[-2:]


@pytest.mark.parametrize("visible", [UUID_0, "0", "GPU-3b5d", None])
def test_a_lost_gpu_outside_its_list_does_not_stop_it(
    fake_node, start_server, good_config, visible
):
    fake_node.write_nvidia_smi([ROW_0, LOST_ROW_1], exit_code=15)
    if visible is not None:
        fake_node.env["CUDA_VISIBLE_DEVICES"] = visible
    (fake_node.root / "sys/bus/pci/devices/0000:c1:00.0/numa_node").unlink()
    server = start_server(single_gpu_0(fake_node, good_config))
    assert server.stop() == 0
    log = server.stderr()
    assert "driver lists 2 GPU(s) through nvidia-smi" in log
    assert f" INFO {LOST_1} is lost {REASON}" in log
    assert f"gpu:0 is {UUID_0} at 0000:81:00.0 on NUMA node 0" in log


@pytest.mark.parametrize("visible", ["0,1", f"{UUID_0},{UUID_1}", None])
def test_a_lost_gpu_in_its_list_stops_it_as_cuda_would(fake_node, visible):
    fake_node.write_nvidia_smi([ROW_0, LOST_ROW_1], exit_code=15)
    if visible is not None:
        fake_node.env["CUDA_VISIBLE_DEVICES"] = visible
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert returncode == 1
    assert lines[1] == DEVICE_UNAVAILABLE
    assert lines[0].endswith(f" ERROR cannot use gpu:1: CUDA device 1 is {LOST_1_IN_USE}")


def test_a_lost_gpu_first_in_its_list_stops_it_before_the_bus_id_check(fake_node):
    fake_node.write_nvidia_smi([ROW_0, LOST_ROW_1], exit_code=15)
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "1,0"
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert (returncode, lines[1]) == (1, DEVICE_UNAVAILABLE)
    assert lines[0].endswith(f" ERROR cannot use gpu:0: CUDA device 0 is {LOST_1_IN_USE}")


@pytest.mark.parametrize(
    ("visible", "ordinal", "stop"),
    [
        pytest.param(
            "0,5,1",
            1,
            "gives 1 device(s) (ordinal 0); its entry 5 names no GPU: the driver lists 2 GPU(s)",
            id="index-past-the-driver",
        ),
        pytest.param(
            "0,0,1",
            1,
            "gives 1 device(s) (ordinal 0); its entry 0 names driver index 0 a second time",
            id="duplicate",
        ),
        pytest.param(
            f"{UUID_0},GPU-ffff,{UUID_1}",
            1,
            "gives 1 device(s) (ordinal 0); its entry GPU-ffff matches no GPU",
            id="unknown-uuid",
        ),
        pytest.param(
            f"GPU-,{UUID_0}",
            0,
            "gives 0 device(s) (no ordinals); its entry GPU- matches 2 GPUs",
            id="ambiguous-prefix",
        ),
    ],
)
def test_cuda_ignores_the_list_from_its_first_bad_entry(fake_node, visible, ordinal, stop):
    fake_node.env["CUDA_VISIBLE_DEVICES"] = visible
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert (returncode, lines[1]) == (
        2,
        f"lingbot: error: CUDA device {ordinal} does not exist: CUDA_VISIBLE_DEVICES {stop},"
        " so CUDA ignores it and the entries after it",
    )


def test_a_bad_entry_after_its_gpus_is_ignored_as_cuda_does(fake_node, start_server):
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "0,1,7"
    server = start_server(fake_node.base_args())
    assert server.stop() == 0


def test_ordinal_beyond_an_unset_list_is_refused(fake_node, good_config):
    fake_node.write_nvidia_smi([ROW_0])
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert (returncode, lines[1]) == (
        2,
        "lingbot: error: CUDA device 1 does not exist: the driver lists 1 GPU(s) and"
        " CUDA_VISIBLE_DEVICES is unset",
    )


def test_numa_check_reads_only_its_own_gpus(fake_node, start_server):
    fake_node.write_nvidia_smi([ROW_0, ROW_1, f"2, {UUID_2}, 00000000:E1:00.0"])
    fake_node.set_numa_node("0000:e1:00.0", 1)
    fake_node.env["CUDA_VISIBLE_DEVICES"] = f"{UUID_0},{UUID_1}"
    server = start_server(fake_node.base_args())
    assert server.stop() == 0
    log = server.stderr()
    assert "driver lists 3 GPU(s)" in log
    assert "0000:e1:00.0" not in log


def test_numa_check_still_applies_to_its_own_gpus(fake_node):
    fake_node.write_nvidia_smi([ROW_0, ROW_1, f"2, {UUID_2}, 00000000:E1:00.0"])
    fake_node.set_numa_node("0000:c1:00.0", 1)
    fake_node.env["CUDA_VISIBLE_DEVICES"] = "0,1"
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert (returncode, lines[1]) == (
        1,
        "RuntimeError: Multi-GPU inference requires all GPUs on same NUMA node",
    )


def test_nvidia_smi_failing_without_a_lost_gpu_is_a_driver_failure(fake_node):
    fake_node.write_nvidia_smi(["Failed to initialize NVML: Driver/library version mismatch"], 9)
    returncode, lines = last_lines(fake_node, fake_node.base_args())
    assert returncode == 1
    assert lines[1].endswith(
        "and nvidia-smi failed (nvidia-smi exited 9: Failed to initialize NVML:"
        " Driver/library version mismatch); is the NVIDIA driver installed?"
    )
