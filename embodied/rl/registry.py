"""RL algorithms by name: the one table that the single-process loop (rl/train.py) and the
roles (embodied/distributed/) both read, so that no module branches on `train.algorithm`.

An entry says, for one algorithm:
  section            the ExperimentConfig section holding its own settings ("ppo" holds the
                     policy-gradient settings every entry shares: clip, epochs, lr, ...)
  collector          (cfg, env, policy) -> a collector over one VecEnv: reset(seed), collect()
                     -> Trajectory [T, B], obs, pop_episode_stats(), state_dict()
  sharded_collector  (cfg, backend, workers, sizes, rollout, make_worker, stages) -> the same
                     over env-worker shards and a rollout role (embodied/distributed/)
  learner            (cfg, policy) -> update(traj) -> stats, state_dict(), generator
  shard              (traj, learner, rank, world_size) -> (this rank's part of traj [T, B_r],
                     its gradient weight, or None for 1 / world_size): data-parallel learners
  check              (cfg) -> None, or ConfigError (one line) on settings that do not fit

Adding an algorithm: its losses in rl/algorithms/, its learner (and collector, if it collects
differently), one `register(Algorithm(...))` below, its settings section in embodied/config.py
if it has any, and its tests in tests/rl/ (CONTRIBUTING.md). The factories import their
modules when called, so importing this table loads no torch. embodied/rl/__init__.py imports it,
so that with any module of embodied.rl loaded every config is checked against it (add_check of
embodied/config.py, which imports no learner room).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from embodied.config import add_check
from embodied.config_loader import ConfigError


@dataclass(frozen=True)
class Algorithm:
    name: str
    section: str
    collector: Callable[..., Any]
    sharded_collector: Callable[..., Any]
    learner: Callable[..., Any]
    shard: Callable[..., tuple[Any, float | None]]
    check: Callable[[Any], None]


ALGORITHMS: dict[str, Algorithm] = {}


def register(alg: Algorithm) -> Algorithm:
    if alg.name in ALGORITHMS:
        raise ValueError(f"algorithm {alg.name!r} registered twice")
    ALGORITHMS[alg.name] = alg
    return alg


def algorithm(name: str) -> Algorithm:
    """The entry of `name`; ConfigError naming the registered ones otherwise."""
    if name not in ALGORITHMS:
        raise ConfigError(f"train.algorithm: {name!r} is not allowed; choose one of {', '.join(ALGORITHMS)}")
    return ALGORITHMS[name]


# -- PPO: GAE advantages from a critic, rollout_steps policy steps of every env per iteration --

def _ppo_collector(cfg: Any, env: Any, policy: Any) -> Any:
    from embodied.rl.rollout import RolloutCollector

    return RolloutCollector(env, policy, cfg.ppo.rollout_steps)


def _ppo_sharded_collector(cfg: Any, backend: Any, workers: list, sizes: list[int], rollout: Any,
                           make_worker: Callable[[int], Any], stages: int) -> Any:
    from embodied.distributed.sharded_rollout import ShardedCollector

    return ShardedCollector(backend, workers, sizes, rollout, cfg.ppo.rollout_steps, stages, make_worker)


def _ppo_learner(cfg: Any, policy: Any) -> Any:
    from embodied.rl.demos import demo_sampler
    from embodied.rl.learner import PPOLearner

    learner = PPOLearner(policy, cfg.ppo)
    learner.demos = demo_sampler(cfg, policy)
    return learner


def _env_shard(traj: Any, learner: Any, rank: int, world_size: int) -> tuple[Any, None]:
    from embodied.distributed.data_parallel import shard_trajectory

    return shard_trajectory(traj, rank, world_size), None


def _shared_check(cfg: Any) -> None:
    """The settings every policy-gradient entry reads from the ppo section."""
    p = cfg.ppo
    if p.bc_coef < 0 or (p.bc_coef > 0 and not p.bc_dataset):
        raise ConfigError(f"ppo.bc_coef: {p.bc_coef}; allowed: 0, or > 0 with ppo.bc_dataset set "
                          "(the demonstrations kept in the update)")
    if p.bc_batch_size < 1:
        raise ConfigError(f"ppo.bc_batch_size: {p.bc_batch_size}; allowed: an integer >= 1")


register(Algorithm("ppo", "ppo", _ppo_collector, _ppo_sharded_collector, _ppo_learner, _env_shard, _shared_check))


# -- GRPO: one episode per env, envs in groups reset from one seed, group-relative advantages --

def _grpo_collector(cfg: Any, env: Any, policy: Any) -> Any:
    from embodied.rl.episodes import DynamicSampler, GroupCollector

    collector = GroupCollector(env, policy, cfg.grpo.group_size, seed=cfg.train.seed)
    g = cfg.grpo
    return DynamicSampler(collector, g.max_collects, g.filter_low, g.filter_high) if g.dynamic_sampling else collector


def _grpo_sharded_collector(cfg: Any, backend: Any, workers: list, sizes: list[int], rollout: Any,
                            make_worker: Callable[[int], Any], stages: int) -> Any:
    from embodied.distributed.sharded_episodes import GroupedCollector

    return GroupedCollector(backend, workers, sizes, rollout, cfg.grpo.group_size, make_worker, stages)


def _grpo_learner(cfg: Any, policy: Any) -> Any:
    from embodied.rl.demos import demo_sampler
    from embodied.rl.learner import GRPOLearner

    learner = GRPOLearner(policy, cfg.ppo, cfg.grpo)
    learner.demos = demo_sampler(cfg, policy)
    return learner


def _group_shard(traj: Any, learner: Any, rank: int, world_size: int) -> tuple[Any, float]:
    """Whole kept groups per rank, the gradient weighed by the rank's share of the episodes."""
    from embodied.distributed.data_parallel import grpo_shard

    return grpo_shard(traj, learner.grpo, rank, world_size)


def _grpo_check(cfg: Any) -> None:
    _shared_check(cfg)
    G = cfg.grpo.group_size
    if G < 2 or cfg.env.num_envs % G:
        raise ConfigError(f"grpo.group_size: env.num_envs={cfg.env.num_envs} must be a multiple of "
                          f"group_size={G} (>= 2)")
    if not 0.0 <= cfg.grpo.filter_low < cfg.grpo.filter_high <= 1.0:
        raise ConfigError(f"grpo.filter_low/filter_high: need 0 <= low < high <= 1, got "
                          f"{cfg.grpo.filter_low}, {cfg.grpo.filter_high}")
    if cfg.ppo.reward_level != "chunk":
        raise ConfigError("ppo.reward_level: GRPO scores whole episodes; use chunk (action needs PPO's critic)")
    if cfg.ppo.normalize_rewards:
        raise ConfigError("ppo.normalize_rewards: PPO only; GRPO normalises its returns within each group "
                          "(grpo.normalize_std)")
    if cfg.grpo.max_collects < 1:
        raise ConfigError(f"grpo.max_collects: {cfg.grpo.max_collects}; allowed: an integer >= 1")
    if cfg.grpo.dynamic_sampling and (cfg.train.backend is not None or cfg.train.placement is not None):
        raise ConfigError("grpo.dynamic_sampling: the single-process loop only; allowed: train.backend and "
                          "train.placement unset, or dynamic_sampling false")


register(Algorithm("grpo", "grpo", _grpo_collector, _grpo_sharded_collector, _grpo_learner, _group_shard,
                   _grpo_check))


@add_check
def check_algorithm(cfg: Any) -> None:
    """train.algorithm is a name of this table, and its settings pass the entry's check."""
    algorithm(cfg.train.algorithm).check(cfg)
