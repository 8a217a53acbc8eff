"""Pure tensor functions: advantages and losses. Each is unit-tested by hand."""

from embodied.algorithms.gae import gae
from embodied.algorithms.ppo import PolicyLossStats, ppo_policy_loss, value_loss

__all__ = ["gae", "ppo_policy_loss", "value_loss", "PolicyLossStats"]
