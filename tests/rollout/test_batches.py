"""Batch sizes of the rollout, as Ansible's serial runs them, and the checks on the list."""

from __future__ import annotations

import pytest
from ansible.executor.playbook_executor import PlaybookExecutor
from hypothesis import given
from hypothesis import strategies as st

from lingbot_fleet.rollout import (
    DEFAULT_BATCHES,
    BatchSpecError,
    assign_batches,
    batch_plan,
    batch_sizes,
    parse_batch_spec,
)


class _Play:
    def __init__(self, serial: list[int | str]) -> None:
        self.serial = serial
        self.hosts = "all"
        self.order = None


class _Inventory:
    def __init__(self, hosts: list[str]) -> None:
        self.hosts = hosts

    def get_hosts(self, pattern: str, order: object = None) -> list[str]:
        return list(self.hosts)


def ansible_batches(serial: list[int | str], hosts: list[str]) -> list[list[str]]:
    """What ansible-core itself makes of a serial list (PlaybookExecutor's batching)."""
    executor = PlaybookExecutor.__new__(PlaybookExecutor)
    executor._inventory = _Inventory(hosts)
    return executor._get_serialized_batches(_Play(serial))


@pytest.mark.parametrize(
    ("host_count", "sizes"),
    [
        (1, [1]),
        (4, [1, 1, 1, 1]),
        (10, [1, 1, 2, 6]),
        (20, [1, 1, 4, 14]),
        (100, [1, 5, 20, 74]),
        (200, [1, 10, 40, 149]),
    ],
)
def test_default_batches(host_count: int, sizes: list[int]) -> None:
    assert batch_sizes(list(DEFAULT_BATCHES), host_count) == sizes


def test_the_last_item_repeats_until_every_host_had_its_turn() -> None:
    assert batch_sizes([1, "25%"], 10) == [1, 2, 2, 2, 2, 1]


def test_counts_and_percentages_mix() -> None:
    assert batch_sizes([2, "50%", 3], 12) == [2, 6, 3, 1]


def test_percentages_are_of_the_whole_fleet_and_at_least_one_host() -> None:
    assert batch_sizes(["1%", "10%"], 30) == [1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2]


def test_a_single_item_works_like_serial_scalar() -> None:
    assert batch_sizes("50%", 5) == [2, 2, 1]
    assert batch_sizes(2, 5) == [2, 2, 1]


def test_assign_batches_keeps_host_order_and_plan_numbers_each_host() -> None:
    hosts = [f"node-{n}" for n in range(1, 6)]
    assert assign_batches([1, "40%", "100%"], hosts) == [
        ["node-1"],
        ["node-2", "node-3"],
        ["node-4", "node-5"],
    ]
    plan = batch_plan([1, "40%", "100%"], hosts)
    assert plan["sizes"] == [1, 2, 2]
    assert plan["batch_of"] == {"node-1": 1, "node-2": 2, "node-3": 2, "node-4": 3, "node-5": 3}
    assert plan["spec"] == [1, "40%", "100%"]


def test_no_host_no_batch() -> None:
    assert batch_sizes(list(DEFAULT_BATCHES), 0) == []


def test_digit_strings_are_counts() -> None:
    assert parse_batch_spec(["1", " 20% "]) == [1, "20%"]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ([], "rollout_batches must be a non-empty list"),
        ('[1, "5%"]', "rollout_batches arrived as the text '[1, \"5%\"]', not a list"),
        ({"a": 1}, "rollout_batches must be a non-empty list"),
        ([1, 0], "rollout_batches item 2 (0): a batch needs at least 1 host"),
        ([-1], "rollout_batches item 1 (-1): a batch needs at least 1 host"),
        (["0%"], "rollout_batches item 1 ('0%'): a percentage must be from 1% to 100%"),
        (["150%"], "rollout_batches item 1 ('150%'): a percentage must be from 1% to 100%"),
        (["5.5%"], "rollout_batches item 1 ('5.5%'): not a host count or a whole percentage"),
        (["ten"], "rollout_batches item 1 ('ten'): not a host count or a whole percentage"),
        ([2.5], "rollout_batches item 1 (2.5): use a host count"),
        ([True], "rollout_batches item 1 (True): use a host count"),
    ],
)
def test_bad_batch_lists_are_refused_with_the_item_and_the_fix(spec: object, message: str) -> None:
    with pytest.raises(BatchSpecError) as error:
        batch_sizes(spec, 10)
    assert str(error.value).startswith(message)


items = st.one_of(
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=1, max_value=100).map(lambda p: f"{p}%"),
)


@given(st.lists(items, min_size=1, max_size=6), st.integers(min_value=0, max_value=120))
def test_same_batches_as_ansible_core(spec: list[int | str], host_count: int) -> None:
    hosts = [f"h{n}" for n in range(host_count)]
    assert assign_batches(spec, hosts) == ansible_batches(spec, hosts)
