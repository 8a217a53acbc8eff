"""Parsing of reset arguments (env ids, seeds) and per-env seeded episode sampling."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from sims.vecenv import EnvError

Sampler = Callable[[np.random.Generator, int], dict[str, np.ndarray]]


def parse_env_ids(env_ids: Any, num_envs: int) -> np.ndarray:
    """env_ids (None, int tensor/array/list [n]) -> int64 [n] in the given order, checked."""
    if env_ids is None:
        return np.arange(num_envs, dtype=np.int64)
    if isinstance(env_ids, torch.Tensor):
        env_ids = env_ids.detach().cpu().numpy()
    ids = np.asarray(env_ids)
    if ids.dtype == bool:
        if ids.shape != (num_envs,):
            raise EnvError(f"env_ids: a boolean mask must have shape ({num_envs},), got {ids.shape}")
        return np.flatnonzero(ids).astype(np.int64)
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise EnvError(f"env_ids: expected a 1-D integer tensor, got shape {ids.shape} {ids.dtype}")
    ids = ids.astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= num_envs):
        raise EnvError(f"env_ids: ids must be in [0, {num_envs}), got {ids.min()}..{ids.max()}")
    if len(np.unique(ids)) != len(ids):
        raise EnvError("env_ids: ids must be unique")
    return ids


def parse_seeds(seed: int | Sequence[int], n: int) -> list[int]:
    """seed (int: seed + k for the k-th env; or one per env) -> n non-negative ints."""
    if isinstance(seed, torch.Tensor):
        seed = seed.tolist()
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seeds = [int(seed) + k for k in range(n)]
    else:
        try:
            seeds = [int(s) for s in seed]  # type: ignore[union-attr]
        except (TypeError, ValueError):
            raise EnvError(f"seed: expected an int or a sequence of ints, got {seed!r:.60}") from None
        if len(seeds) != n:
            raise EnvError(f"seed: got {len(seeds)} seeds for {n} envs being reset")
    if seeds and min(seeds) < 0:
        raise EnvError(f"seed: seeds must be non-negative, got {min(seeds)}")
    return seeds


def sample_seeded(sampler: Sampler, seeds: list[int]) -> dict[str, np.ndarray]:
    """Sample one episode per seed, each from its own generator, stacked: leading dim len(seeds).

    Equal seeds give equal episodes whatever the position.
    """
    eps = [sampler(np.random.default_rng(s), 1) for s in seeds]
    return {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}


def stream_from(seeds: list[int]) -> np.random.Generator:
    """The batch-level generator for auto-resets, seeded from a seeded reset's seeds."""
    return np.random.default_rng(np.random.SeedSequence([*seeds, 0x5EED]))


def reset_seeds(rng: np.random.Generator, seeded: bool, seed: Any, n: int) -> tuple[np.random.Generator, bool, list[int]]:
    """(stream, seeded, the seeds of n reset envs): seed None draws them from the stream; an
    explicit seed gives them (parse_seeds) and, at the first explicit reset, starts a new stream
    from them (stream_from), so that the auto-resets after it repeat with the seeds."""
    if seed is None:
        return rng, seeded, rng.integers(0, 2**31 - 1, n).tolist()
    seeds = parse_seeds(seed, n)
    return (rng, seeded, seeds) if seeded else (stream_from(seeds), True, seeds)


def stream_state(rng: np.random.Generator, seeded: bool) -> dict[str, Any]:
    """A seed stream as a checkpoint holds it (JSON text and an int); stream_from_state reverses it."""
    import json

    return {"rng_state": json.dumps(rng.bit_generator.state), "rng_seeded": int(seeded)}


def stream_from_state(state: dict[str, Any]) -> tuple[np.random.Generator, bool]:
    import json

    rng = np.random.default_rng()
    rng.bit_generator.state = json.loads(state["rng_state"])
    return rng, bool(int(state["rng_seeded"]))
