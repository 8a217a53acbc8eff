"""SeedStream: the seeds of a batched env whose simulator draws each episode from one seed
(gymnasium's envs, the side venvs' workers): the seeds of reset(seed, env_ids), the stream that
unseeded resets and auto-resets draw from, and its checkpoint. A mixin of GymVecEnv
(sims/gym/env.py) and SideVenvVecEnv (sims/sidevenv/env.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sims.mujoco.seeding import parse_env_ids, reset_seeds, stream_from_state, stream_state
from sims.vecenv import Seed


class SeedStream:
    """The env's stream: _rng (numpy Generator) and _seeded (whether a seeded reset reseeded it)."""

    num_envs: int
    _rng: np.random.Generator
    _seeded: bool

    def _start_stream(self, seed: int | None) -> None:
        """The stream before any seeded reset: from `seed` (None: fresh entropy)."""
        self._rng, self._seeded = np.random.default_rng(seed), False

    def _draw(self, n: int) -> list[int]:
        """n seeds of new episodes from the stream."""
        return self._rng.integers(0, 2**31 - 1, n).tolist()

    def _reset_seeds(self, seed: Seed, env_ids: torch.Tensor | None) -> tuple[np.ndarray, list[int]]:
        """The envs int64 [n] and their seeds [n] of reset(seed, env_ids) (sims/mujoco/seeding.py:
        reset_seeds: seed + k for the k-th env, one per env, or None: the stream's)."""
        ids = parse_env_ids(env_ids, self.num_envs)
        self._rng, self._seeded, seeds = reset_seeds(self._rng, self._seeded, seed, len(ids))
        return ids, seeds

    def _stream_state(self) -> dict[str, Any]:
        return stream_state(self._rng, self._seeded)

    def _load_stream(self, state: dict[str, Any]) -> None:
        self._rng, self._seeded = stream_from_state(state)
