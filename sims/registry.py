"""Env registry: make_env(task, num_envs, **kwargs), list_tasks(), expert_for(task) over every
simulator (MuJoCo tasks by name, "ms:" ManiSkill3, "libero:" LIBERO, "wm:" world models).
The MuJoCo tasks register themselves: sims/mujoco/tasks/registry.py."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import numpy as np

    from sims.vecenv import VecEnv

# sims.maniskill.tasks.names() without importing it (it imports torch); checked the same way.
MANISKILL_TASK_NAMES = ("ms:PickCube-v1", "ms:PushCube-v1", "ms:StackCube-v1", "ms:PullCube-v1",
                        "ms:PegInsertionSide-v1")


def list_tasks() -> list[str]:
    """Names of the MuJoCo tasks (registered in their own files: sims/mujoco/tasks/registry.py),
    read without importing MuJoCo."""
    from sims.mujoco.tasks.registry import task_names

    return task_names()


def task_cycle(task: str) -> int:
    """How many tasks hold fixed rows of a batch of `task`: env i of a MetaWorld benchmark runs
    task i mod n (metaworld:MT10 10, metaworld:MT50 50), so a batch of fewer envs leaves tasks
    out; "multi:A+B+C" splits its rows into n = 3 equal blocks (a batch is a multiple of n); 1
    for every other name. Reads the name only; one-line EnvError for a bad one."""
    if task.startswith("metaworld:"):
        from sims.metaworld.tasks import parse_name

        return len(parse_name(task)[1])
    if task.startswith("multi:"):
        from sims.multitask import parse_multi

        return len(parse_multi(task))
    return 1


def batch_for(task: str, episodes: int, cap: int) -> int:
    """envs for running `episodes` episodes of `task`: min(episodes, cap), then, where rows hold
    fixed tasks (task_cycle n > 1), rounded down to a multiple of n and at least n, so that every
    task runs and each as often (metaworld:MT50, 250 episodes, cap 64: 50 envs)."""
    n, b = task_cycle(task), min(episodes, cap)
    return b if n == 1 else max(n, b - b % n)


def make_env(task: str, num_envs: int, **kwargs: Any) -> VecEnv:
    """A MujocoVecEnv of `task` with num_envs envs; kwargs go to MujocoVecEnv (obs_mode,
    reward_mode, image_size, cameras, render_size, control_hz, timestep, num_threads, seed,
    max_episode_steps, device, randomization, reality). Names starting with "ms:"
    ("ms:PickCube-v1") are ManiSkill3 tasks (sims/maniskill, the `maniskill` extra); kwargs go to ManiSkillVecEnv
    (randomization and reality: the knobs of sims/maniskill/randomization.py).
    Names starting with "libero:" ("libero:libero_spatial/0", "libero:libero_spatial") are LIBERO
    tasks (sims/libero, `make libero`); kwargs go to LiberoVecEnv. "metaworld:MT10",
    "metaworld:MT50" and "metaworld:<task>" ("metaworld:pick-place-v3") are MetaWorld tasks
    (sims/metaworld, `make metaworld`); kwargs go to MetaWorldVecEnv. "multi:A+B+..." puts
    several tasks in one batch (sims/multitask.py; num_envs split evenly, kwargs to each). "wm:PATH" is a world model
    trained by `embodied world-model train` (sims/world_model); of the kwargs it takes obs_mode
    ("rgb" for a model trained with cameras), cameras, image_size, reward_mode (dense, sparse or
    task), max_episode_steps, seed, keyframes, rollout (mean or members), model_noise,
    allow_failed_model and expected_task (the task it must model). backend: "cpu" (C MuJoCo,
    `mujoco.batch`) or "warp" (MuJoCo Warp on `device`, sims/mujoco/warp_env.py), for the MuJoCo
    tasks; other families take "cpu" only."""
    backend = kwargs.pop("backend", "cpu") or "cpu"
    if backend not in ("cpu", "warp"):
        from sims.vecenv import EnvError

        raise EnvError(f"env.backend: unknown backend {backend!r}; allowed: cpu, warp")
    if backend == "warp" and ":" in task and not task.startswith("multi:"):
        from sims.vecenv import EnvError

        raise EnvError(f"env.backend: warp runs the MuJoCo tasks (sims/mujoco/tasks); allowed for {task}: cpu")
    if task.startswith("multi:"):
        kwargs["backend"] = backend
    if not task.startswith("wm:"):  # the world model's own knobs, at their defaults
        from sims.vecenv import EnvError

        for key, what, default, shown in (("rollout", "steps a world model's ensemble", "mean", "mean"),
                                          ("model_noise", "perturbs a world model's steps", 0.0, "0"),
                                          ("allow_failed_model", "uses a world model that failed its quality gate",
                                           False, "false")):
            if kwargs.pop(key, default) != default:
                raise EnvError(f"env.{key}: {what} (env.task=wm:PATH); allowed for {task}: {shown}")
    if task.startswith("libero:"):  # LIBERO in its own venv (sims/libero, `make libero`)
        from sims.libero.env import LiberoVecEnv
        from sims.vecenv import EnvError

        for key in ("randomization", "reality"):
            if kwargs.pop(key, None) is not None:
                raise EnvError(f"env.{key}: domain randomisation is implemented for the MuJoCo tasks "
                               f"only; allowed for LIBERO tasks: null (docs/sim2real.md)")
        return LiberoVecEnv(task, num_envs, **{k: v for k, v in kwargs.items() if v is not None})
    if task.startswith("multi:"):  # several tasks in one batch (sims/multitask.py)
        from sims.multitask import MultiTaskVecEnv, parse_multi
        from sims.vecenv import EnvError

        names = parse_multi(task)
        if num_envs % len(names):
            raise EnvError(f"num_envs: {num_envs} envs cannot be split evenly over the {len(names)} tasks of "
                           f"{task}; allowed: a multiple of {len(names)}")
        envs = []
        try:
            for name in names:
                envs.append(make_env(name, num_envs // len(names), **kwargs))
            return MultiTaskVecEnv(task, envs)
        except BaseException:
            for e in envs:
                e.close()
            raise
    if task.startswith("metaworld:"):  # MetaWorld in its own venv (sims/metaworld, `make metaworld`)
        from sims.metaworld.env import MetaWorldVecEnv
        from sims.vecenv import EnvError

        for key in ("randomization", "reality"):
            if kwargs.pop(key, None) is not None:
                raise EnvError(f"env.{key}: domain randomisation is implemented for the MuJoCo tasks "
                               f"only; allowed for MetaWorld tasks: null (docs/sim2real.md)")
        return MetaWorldVecEnv(task, num_envs, **{k: v for k, v in kwargs.items() if v is not None})
    if task.startswith("wm:"):  # a learned world model (sims/world_model, docs/world_model.md)
        from sims.world_model.env import WorldModelVecEnv
        from sims.vecenv import EnvError

        for key in ("randomization", "reality"):
            if kwargs.pop(key, None) is not None:
                raise EnvError(f"env.{key}: domain randomisation is implemented for the MuJoCo tasks "
                               f"only; allowed for world models: null")
        allowed = ("obs_mode", "expected_task", "max_episode_steps", "seed", "keyframes", "reward_mode", "cameras",
                   "image_size", "rollout", "model_noise", "allow_failed_model")
        kwargs = {k: v for k, v in kwargs.items() if k in allowed and v is not None}
        return WorldModelVecEnv(task[3:], num_envs, **kwargs)
    if task.startswith("ms:"):
        from sims.maniskill.env import ManiSkillVecEnv

        return ManiSkillVecEnv(task, num_envs, **{k: v for k, v in kwargs.items() if v is not None})
    from sims.mujoco.tasks.registry import task_class

    if backend == "warp":
        from sims.mujoco.warp_env import WarpVecEnv

        return WarpVecEnv(task_class(task)(), num_envs, **kwargs)
    from sims.mujoco.env import MujocoVecEnv

    return MujocoVecEnv(task_class(task)(), num_envs, **kwargs)


def expert_for(task: str) -> Callable[[np.ndarray], np.ndarray]:
    """The task's expert: privileged obs float [B, P] -> actions float32 [B, A] (A = 4 for MuJoCo
    tasks, 7 for ManiSkill tasks in pd_ee_delta_pose: scripted). "ms:<EnvId>@pd_joint_delta_pos"
    gives the mplib motion-planning expert (A = 8; sims/maniskill/mplib_expert.py), which also
    has reset(env_ids, privileged) for new episodes and close(). "libero:libero_spatial[/TASK]"
    gives the scripted pick-and-place expert of sims/libero/expert.py (A = 7). "metaworld:..."
    gives MetaWorld's scripted policies, run in the side venv (sims/metaworld/expert.py, A = 4;
    it has close())."""
    if task.startswith("multi:"):
        from sims.multitask import MultiExpert, parse_multi

        return MultiExpert([expert_for(t) for t in parse_multi(task)])
    if task.startswith("metaworld:"):
        from sims.metaworld.expert import expert_for as mw_expert_for

        return mw_expert_for(task)
    if task.startswith("libero:"):
        from sims.libero.expert import expert_for as libero_expert_for

        return libero_expert_for(task)
    if task.startswith("ms:"):
        if task.partition("@")[2] == "pd_joint_delta_pos":
            from sims.maniskill.mplib_expert import expert_for as mplib_expert_for

            return mplib_expert_for(task)
        from sims.maniskill.expert import expert_for as ms_expert_for

        return ms_expert_for(task)
    from sims.mujoco.tasks.registry import task_class

    return task_class(task).expert
