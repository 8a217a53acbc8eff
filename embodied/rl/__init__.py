"""Reinforcement learning: the training loop (`embodied train`), rollout collectors, learners, algorithms."""

from embodied.rl import registry  # noqa: F401  (its algorithm check joins every config loaded: embodied/config.py)
