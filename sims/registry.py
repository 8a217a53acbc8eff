"""Env registry: make_env(task, num_envs, **kwargs), list_tasks(), expert_for(task) over every
simulator family. A family (a prefix: "ms:", "libero:", "metaworld:", "gym:", "multi:", "wm:";
the MuJoCo tasks have none) declares itself in its own package, sims/<package>/family.py
(sims/family.py); this module reads that table. The MuJoCo tasks register themselves:
sims/mujoco/tasks/registry.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from sims.family import Family, families, family_of

if TYPE_CHECKING:
    import numpy as np

    from sims.vecenv import VecEnv

__all__ = ["Family", "batch_for", "device_kwargs", "expert_for", "families", "family_of", "list_tasks", "make_env",
           "sim_task", "task_cycle", "MANISKILL_TASK_NAMES"]


def __getattr__(name: str) -> Any:
    if name == "MANISKILL_TASK_NAMES":  # the ManiSkill family's names (sims/maniskill/family.py)
        return tuple(family_of("ms:").names())
    raise AttributeError(name)


def list_tasks() -> list[str]:
    """Names of the MuJoCo tasks (registered in their own files: sims/mujoco/tasks/registry.py),
    read without importing MuJoCo."""
    return family_of("").names()


def task_cycle(task: str) -> int:
    """How many tasks hold fixed rows of a batch of `task`: env i of a MetaWorld benchmark runs
    task i mod n (metaworld:MT10 10, metaworld:MT50 50), so a batch of fewer envs leaves tasks
    out; "multi:A+B+C" splits its rows into n = 3 equal blocks (a batch is a multiple of n); 1
    for every other name (the family's task_cycle). Reads the name only; one-line EnvError for a bad one."""
    return family_of(task).task_cycle(task)


def batch_for(task: str, episodes: int, cap: int) -> int:
    """envs for running `episodes` episodes of `task`: min(episodes, cap), then, where rows hold
    fixed tasks (task_cycle n > 1), rounded down to a multiple of n and at least n, so that every
    task runs and each as often (metaworld:MT50, 250 episodes, cap 64: 50 envs)."""
    n, b = task_cycle(task), min(episodes, cap)
    return b if n == 1 else max(n, b - b % n)


def device_kwargs(task: str, device: Any) -> dict:
    """Extra make_env kwargs for building `task` for a torch device (its family's device_kwargs:
    ManiSkill's physx_cuda on CUDA, physx_cpu otherwise); {} for a family without any."""
    fam = family_of(task)
    return fam.device_kwargs(device) if fam.device_kwargs is not None else {}


def sim_task(task: str) -> str:
    """The simulator task behind an env name (its family's sim_task: a world model's, wm:DIR, is
    the task it learned); the name itself for every other family."""
    fam = family_of(task)
    return fam.sim_task(task) if fam.sim_task is not None else task


def _check_generic(fam: Family, task: str, kwargs: dict) -> None:
    """The checks every family shares, on make_env's kwargs (in place): the backend, the
    randomisation knobs, and the keywords only another family reads (at their defaults they go)."""
    from sims.vecenv import EnvError

    backend = kwargs.pop("backend", "cpu") or "cpu"
    if backend not in ("cpu", "warp"):
        raise EnvError(f"env.backend: unknown backend {backend!r}; allowed: cpu, warp")
    if backend not in fam.backends:
        raise EnvError(f"env.backend: {backend} runs the MuJoCo tasks (sims/mujoco/tasks); allowed for {task}: "
                       f"{', '.join(fam.backends)}")
    if len(fam.backends) > 1:
        kwargs["backend"] = backend
    for other in families():
        if other is fam:
            continue
        for own in other.own_kwargs:
            if kwargs.pop(own.key, own.default) != own.default:
                raise EnvError(f"env.{own.key}: {own.what} (env.task={other.pattern}); allowed for {task}: {own.shown}")
    if not fam.knobs(task):
        for key in ("randomization", "reality"):
            if kwargs.pop(key, None) is not None:
                raise EnvError(f"env.{key}: domain randomisation is implemented for the MuJoCo tasks and "
                               f"ManiSkill only; allowed for {fam.title}: null (docs/sim2real.md)")


def make_env(task: str, num_envs: int, **kwargs: Any) -> VecEnv:
    """The VecEnv of `task` with num_envs envs, made by its family (sims/<package>/family.py).

    MuJoCo tasks by name ("PushCube"): kwargs go to MujocoVecEnv (obs_mode, reward_mode,
    image_size, cameras, render_size, control_hz, timestep, num_threads, seed, max_episode_steps,
    device, randomization, reality); backend "cpu" (C MuJoCo, `mujoco.batch`) or "warp" (MuJoCo
    Warp on `device`, sims/mujoco/warp_env.py); other families take "cpu" only.
    "ms:PickCube-v1": ManiSkill3 (sims/maniskill, the `maniskill` extra; randomization and
    reality: the knobs of sims/maniskill/randomization.py). "libero:libero_spatial[/0]": LIBERO
    (sims/libero, `make libero`). "metaworld:MT10", "metaworld:MT50", "metaworld:<task>":
    MetaWorld (sims/metaworld, `make metaworld`). "gym:<env id>": a gymnasium env behind the
    contract (sims/gym, docs/gym.md). "multi:A+B+...": several tasks in one batch
    (sims/multitask.py; num_envs split evenly, kwargs to each). "wm:PATH": a world model trained by
    `embodied world-model train` (sims/world_model); of the kwargs it takes obs_mode, cameras,
    image_size, reward_mode (dense, sparse or task), max_episode_steps, seed, keyframes, rollout
    (mean or members), model_noise, allow_failed_model and expected_task."""
    fam = family_of(task)
    kwargs = dict(kwargs)
    _check_generic(fam, task, kwargs)
    return fam.make(task, num_envs, **kwargs)


def expert_for(task: str) -> Callable[[np.ndarray], np.ndarray]:
    """The task's expert: privileged obs float [B, P] -> actions float32 [B, A] (A = 4 for MuJoCo
    tasks, 7 for ManiSkill tasks in pd_ee_delta_pose: scripted). "ms:<EnvId>@pd_joint_delta_pos"
    gives the mplib motion-planning expert (A = 8; sims/maniskill/mplib_expert.py), which also
    has reset(env_ids, privileged) for new episodes and close(). "libero:libero_spatial[/TASK]"
    gives the scripted pick-and-place expert of sims/libero/expert.py (A = 7). "metaworld:..."
    gives MetaWorld's scripted policies, run in the side venv (sims/metaworld/expert.py, A = 4;
    it has close()). A family without an expert: one-line EnvError."""
    fam = family_of(task)
    if fam.expert is None:
        from sims.vecenv import EnvError

        with_expert = [f.pattern for f in families() if f.expert is not None]
        raise EnvError(f"expert: {fam.title} have no scripted expert ({task}); allowed: {', '.join(with_expert)}")
    return fam.expert(task)
