"""Pure tensor functions: advantages and losses. Each is unit-tested by hand."""

from embodied.rl.algorithms.gae import action_level_gae, gae
from embodied.rl.algorithms.grpo import grpo_advantages, grpo_keep_mask
from embodied.rl.algorithms.normalize import task_normalized
from embodied.rl.algorithms.ppo import PolicyLossStats, kl_to_reference, ppo_policy_loss, value_loss

__all__ = ["gae", "action_level_gae", "grpo_advantages", "grpo_keep_mask", "ppo_policy_loss", "kl_to_reference", "value_loss", "PolicyLossStats",
           "task_normalized"]
