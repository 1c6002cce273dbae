"""Checks the settings against the hardware and decides which GPU pairs cooperate."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from .cli import Settings
from .config import ContractError, GpuTopologyEntry
from .hardware import (
    LostGpu,
    PhysicalGpu,
    check_ordinal_listed,
    list_physical_gpus,
    memory_binding,
    parse_visible_devices,
    read_numa_node,
    resolve_ordinal,
    visible_devices,
)

NUMA_ERROR_MESSAGE = "Multi-GPU inference requires all GPUs on same NUMA node"
# What a CUDA program prints when it cannot create a context on its device
# (CUDA_ERROR_DEVICE_UNAVAILABLE), e.g. on a GPU that fell off the bus.
DEVICE_UNAVAILABLE_MESSAGE = "CUDA error: CUDA-capable device(s) is/are busy or unavailable"


@dataclass(frozen=True)
class GpuPlacement:
    device: str
    entry: GpuTopologyEntry
    physical: PhysicalGpu
    numa_node: int


@dataclass(frozen=True)
class RouteDecision:
    source: str
    target: str
    path_type: str
    bandwidth_gbits_per_s: float
    latency_ns: float
    usable: bool


@dataclass(frozen=True)
class Deployment:
    settings: Settings
    placements: tuple[GpuPlacement, ...]
    routes: tuple[RouteDecision, ...]

    @property
    def usable_peer_link_count(self) -> int:
        return sum(1 for route in self.routes if route.usable)

    def balancer_weights(self) -> dict[str, float]:
        balancer = self.settings.load_balancer
        if balancer.type == "adaptive":
            return {device: balancer.gpu_weights[device] for device in self.settings.devices}
        return dict.fromkeys(self.settings.devices, 1.0)


def check_config_against_command_line(settings: Settings, log: logging.Logger) -> None:
    """Every GPU, weight and layer placement must agree with --gpus."""
    config = settings.config
    source = str(settings.config_path)
    for ordinal in settings.gpu_ordinals:
        if config.topology_entry(ordinal) is None:
            listed = ", ".join(str(entry.gpu_id) for entry in config.gpu_topology)
            raise ContractError(
                f"{source}: --gpus names GPU {ordinal}, but hardware_profile.gpu_topology"
                f" lists only gpu_id {listed}; add its entry or fix --gpus"
            )
    for pattern, device in config.layer_affinity.items():
        if device not in settings.devices:
            raise ContractError(
                f"{source}: hardware_profile.layer_affinity[{pattern!r}] places layers on"
                f" {device}, which is not in --gpus {','.join(map(str, settings.gpu_ordinals))}"
            )
    balancer = settings.load_balancer
    where = settings.load_balancer_source
    for device in balancer.gpu_weights:
        if device not in settings.devices:
            raise ContractError(
                f"{where}: gpu_weights has a weight for {device}, which is not in --gpus"
                f" {','.join(map(str, settings.gpu_ordinals))}"
            )
    if balancer.type == "adaptive":
        for device in settings.devices:
            if device not in balancer.gpu_weights:
                raise ContractError(
                    f"{where}: the adaptive balancer needs a weight for every GPU in --gpus;"
                    f" gpu_weights has none for {device}"
                )
    elif balancer.gpu_weights:
        log.warning(
            "load_balancer type %s ignores gpu_weights (%s); every GPU weighs 1.0",
            balancer.type,
            where,
        )


def _cuda_order_warning(visible: list[str] | None, log: logging.Logger) -> None:
    uses_indices = visible is None or any(selector.isdigit() for selector in visible)
    order = os.environ.get("CUDA_DEVICE_ORDER")
    if uses_indices and order != "PCI_BUS_ID":
        log.warning(
            "CUDA_DEVICE_ORDER is %s; set CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA ordinals,"
            " NVML indices and nvidia-smi agree",
            order if order is not None else "unset (FASTEST_FIRST)",
        )


def place_gpus(
    settings: Settings, log: logging.Logger
) -> list[tuple[str, GpuTopologyEntry, PhysicalGpu]]:
    """Map each CUDA ordinal to its GPU and check config.yaml's bus_id against it.

    Only the server's own GPUs count: a lost GPU outside them is logged and left alone;
    one of them lost fails as creating its CUDA context would (RuntimeError)."""
    visible = parse_visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    _cuda_order_warning(visible, log)
    for ordinal in settings.gpu_ordinals:
        check_ordinal_listed(ordinal, visible)
    driver_gpus, driver_source = list_physical_gpus()
    log.info("driver lists %d GPU(s) through %s", len(driver_gpus), driver_source)
    for gpu in driver_gpus:
        if isinstance(gpu, LostGpu):
            log.info("%s is lost (%s)", gpu.where(), gpu.reason)
    devices = visible_devices(visible, driver_gpus)
    placed: list[tuple[str, GpuTopologyEntry, PhysicalGpu]] = []
    for ordinal, device in zip(settings.gpu_ordinals, settings.devices, strict=True):
        physical = resolve_ordinal(ordinal, visible, devices)
        if isinstance(physical, LostGpu):
            log.error(
                "cannot use %s: CUDA device %d is %s, which the driver reports lost (%s)",
                device,
                ordinal,
                physical.where(),
                physical.reason,
            )
            raise RuntimeError(DEVICE_UNAVAILABLE_MESSAGE)
        entry = settings.config.topology_entry(ordinal)
        assert entry is not None
        if entry.bus_id != physical.bus_id:
            raise ContractError(
                f"{settings.config_path}: gpu_topology gpu_id {ordinal} has bus_id"
                f" {entry.bus_id}, but CUDA device {ordinal} ({physical.uuid}, driver index"
                f" {physical.index}) is at {physical.bus_id}; regenerate the config for this"
                " machine or fix CUDA_VISIBLE_DEVICES"
            )
        placed.append((device, entry, physical))
    return placed


def check_numa(
    placed: list[tuple[str, GpuTopologyEntry, PhysicalGpu]], log: logging.Logger
) -> tuple[GpuPlacement, ...]:
    """Read each GPU's NUMA node; multi-GPU needs one node (RuntimeError otherwise)."""
    multi_gpu = len(placed) > 1
    placements: list[GpuPlacement] = []
    for device, entry, physical in placed:
        try:
            numa_node = read_numa_node(physical.bus_id)
        except ContractError as error:
            if multi_gpu:
                raise
            log.warning("%s; skipping the NUMA binding check", error)
            numa_node = -1
        log.info(
            "%s is %s at %s on NUMA node %d", device, physical.uuid, physical.bus_id, numa_node
        )
        placements.append(GpuPlacement(device, entry, physical, numa_node))
    nodes = {placement.numa_node for placement in placements}
    if multi_gpu and len(nodes) > 1:
        for placement in placements:
            log.error(
                "%s (%s) is on NUMA node %d",
                placement.device,
                placement.physical.bus_id,
                placement.numa_node,
            )
        raise RuntimeError(NUMA_ERROR_MESSAGE)
    if nodes == {-1}:
        log.warning(
            "the kernel reports no NUMA node for the GPUs (numa_node -1; pci=noacpi on the"
            " kernel command line?)"
        )
    return tuple(placements)


def warn_if_unbound(placements: tuple[GpuPlacement, ...], log: logging.Logger) -> None:
    gpu_node = placements[0].numa_node
    if gpu_node < 0:
        return
    allowed_nodes, binding_source = memory_binding()
    if allowed_nodes != {gpu_node}:
        log.warning(
            "process is not bound to NUMA node %d of its GPUs (%s); run it under"
            " numactl --cpunodebind=%d --membind=%d",
            gpu_node,
            binding_source,
            gpu_node,
            gpu_node,
        )
    else:
        log.info("process is bound to NUMA node %d (%s)", gpu_node, binding_source)


def decide_routes(settings: Settings, log: logging.Logger) -> tuple[RouteDecision, ...]:
    """Peer links between used GPUs, usable when at or above the threshold."""
    threshold_gbits_per_s = settings.peer_access_threshold_gbits_per_s
    routes: list[RouteDecision] = []
    for ordinal in settings.gpu_ordinals:
        entry = settings.config.topology_entry(ordinal)
        assert entry is not None
        for link in entry.peer_links:
            if link.target_gpu_id not in settings.gpu_ordinals:
                continue
            routes.append(
                RouteDecision(
                    source=f"gpu:{ordinal}",
                    target=f"gpu:{link.target_gpu_id}",
                    path_type=link.path_type,
                    bandwidth_gbits_per_s=link.bandwidth_gbits_per_s,
                    latency_ns=link.latency_ns,
                    usable=link.bandwidth_gbits_per_s >= threshold_gbits_per_s,
                )
            )
    listed = {(route.source, route.target) for route in routes}
    for source in settings.devices:
        for target in settings.devices:
            if source != target and (source, target) not in listed:
                log.warning(
                    "no peer link %s->%s in gpu_topology; that direction is host-staged",
                    source,
                    target,
                )
    level = logging.INFO if settings.config.debug_mode else logging.DEBUG
    for route in routes:
        log.log(
            level,
            "route_decision %s->%s path_type=%s bandwidth_gbps=%g latency_ns=%g"
            " threshold_gbps=%g peer_access=%s",
            route.source,
            route.target,
            route.path_type,
            route.bandwidth_gbits_per_s,
            route.latency_ns,
            threshold_gbits_per_s,
            "on" if route.usable else "off (below threshold, host-staged)",
        )
    return tuple(routes)


def prepare(settings: Settings, log: logging.Logger) -> Deployment:
    """All start-up checks; raises ContractError, DriverUnavailableError or RuntimeError."""
    check_config_against_command_line(settings, log)
    log.info(
        "peer-access threshold %g GB/s = %g Gbit/s (from %s; config.yaml p2p_threshold_gbps: %s)",
        settings.peer_access_threshold_gbytes_per_s,
        settings.peer_access_threshold_gbits_per_s,
        settings.peer_access_threshold_source,
        "unset"
        if settings.config.p2p_threshold_gbits_per_s is None
        else f"{settings.config.p2p_threshold_gbits_per_s:g} Gbit/s",
    )
    placed = place_gpus(settings, log)
    placements = check_numa(placed, log)
    warn_if_unbound(placements, log)
    routes = decide_routes(settings, log)
    deployment = Deployment(settings, placements, routes)
    if len(placements) > 1 and deployment.usable_peer_link_count == 0:
        log.warning("no GPU pair reaches the peer-access threshold; all KV traffic is host-staged")
    return deployment
