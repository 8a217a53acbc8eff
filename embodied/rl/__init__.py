"""Reinforcement learning: the training loop (`embodied train`), rollout collectors, learners, algorithms."""
