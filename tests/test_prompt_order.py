"""The local engine's prompt order across epochs (engines/local/prompts.DataOrder): every
epoch trains on every whole batch of its permutation, the last one included, then starts a
new permutation; an incomplete last batch is dropped, as NeMo RL's loader (drop_last) does.
A small data file or a long run crosses many epoch boundaries, so an order that skipped a
batch there would train on the first prompts for ever."""

from __future__ import annotations

import copy

import pytest

from gdpo_nemo.engines.local.prompts import DataOrder


def batches(order: DataOrder, count: int) -> list[list[int]]:
    return [order.next_batch() for _ in range(count)]


def test_without_shuffle_each_epoch_is_the_file_order_in_whole_batches_the_last_included():
    order = DataOrder(size=6, batch=2, shuffle=False, seed=0)
    assert order.steps_per_epoch == 3
    assert batches(order, 7) == [[0, 1], [2, 3], [4, 5], [0, 1], [2, 3], [4, 5], [0, 1]]


def test_an_incomplete_last_batch_is_dropped_and_the_next_epoch_starts_whole():
    order = DataOrder(size=7, batch=3, shuffle=False, seed=0)
    assert order.steps_per_epoch == 2
    assert batches(order, 5) == [[0, 1, 2], [3, 4, 5], [0, 1, 2], [3, 4, 5], [0, 1, 2]]


@pytest.mark.parametrize("size, batch", [(8, 2), (9, 3), (10, 4), (4, 4)])
def test_with_shuffle_each_epoch_uses_its_steps_per_epoch_batches_of_distinct_prompts(size, batch):
    order = DataOrder(size=size, batch=batch, shuffle=True, seed=5)
    epochs = 4
    drawn = batches(order, epochs * order.steps_per_epoch)
    assert all(len(b) == batch for b in drawn)
    per_epoch = [sum(drawn[e * order.steps_per_epoch:(e + 1) * order.steps_per_epoch], []) for e in range(epochs)]
    for used in per_epoch:
        assert len(set(used)) == order.steps_per_epoch * batch  # no prompt twice within an epoch
        if size % batch == 0:
            assert sorted(used) == list(range(size))  # and every prompt once
    assert len({tuple(used) for used in per_epoch}) == epochs  # a new permutation each epoch
    # The epoch boundary is where the counts say: the next draw is epoch `epochs`, offset one batch.
    order.next_batch()
    assert order.position == {"epoch": epochs, "offset": batch}


def test_a_saved_position_continues_the_same_order_across_an_epoch_boundary():
    order = DataOrder(size=6, batch=2, shuffle=True, seed=3)
    straight = batches(copy.deepcopy(order), 8)
    first = batches(order, 3)  # the whole first epoch: the checkpoint holds its end
    resumed = DataOrder(size=6, batch=2, shuffle=True, seed=3, position=dict(order.position))
    assert first + batches(resumed, 5) == straight
