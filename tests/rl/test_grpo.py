"""GRPO advantages and group filtering against hand-computed numbers."""

import math

import pytest
import torch

from embodied.rl.algorithms import grpo_advantages, grpo_keep_mask


def test_group_normalised_advantages():
    # two groups of 4, interleaved ids: group 0 = [1, 0, 0, 1], group 1 = [1, 1, 1, 0]
    R = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    g = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    adv = grpo_advantages(R, g, eps=0.0)
    # group 0: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    s0 = math.sqrt(1 / 3)
    # group 1: mean 0.75, unbiased std sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5
    expect = torch.tensor([0.5 / s0, 0.25 / 0.5, -0.5 / s0, 0.25 / 0.5,
                           -0.5 / s0, 0.25 / 0.5, 0.5 / s0, -0.75 / 0.5])
    torch.testing.assert_close(adv, expect)
    torch.testing.assert_close(grpo_advantages(R, g, normalize_std=False),
                               torch.tensor([0.5, 0.25, -0.5, 0.25, -0.5, 0.25, 0.5, -0.75]))


def test_uniform_group_has_zero_advantage_and_is_filtered():
    R = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    g = torch.tensor([0, 0, 1, 1, 2, 2])
    adv = grpo_advantages(R, g)
    assert adv[:4].abs().max() == 0.0  # all-success and all-fail groups
    assert grpo_keep_mask(R, g).tolist() == [False, False, False, False, True, True]


def test_filter_bounds():
    # group success rates: 0.25, 0.5, 0.75 (groups of 4)
    s = torch.tensor([1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0], dtype=torch.bool)
    g = torch.arange(3).repeat_interleave(4)
    assert grpo_keep_mask(s, g).tolist() == [True] * 12
    keep = grpo_keep_mask(s, g, low=0.3, high=0.7)
    assert keep.tolist() == [False] * 4 + [True] * 4 + [False] * 4
    with pytest.raises(ValueError, match="low < high"):
        grpo_keep_mask(s, g, low=0.8, high=0.2)


def test_shaped_returns_and_bad_groups():
    R = torch.tensor([2.0, 4.0, 6.0])
    adv = grpo_advantages(R, torch.zeros(3, dtype=torch.long), eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0]))  # mean 4, std 2
    with pytest.raises(ValueError, match="at least 2 members"):
        grpo_advantages(R, torch.tensor([0, 0, 1]))
