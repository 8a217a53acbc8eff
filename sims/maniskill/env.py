"""ManiSkillVecEnv: ManiSkill3 tasks behind our VecEnv contract (see sims/vecenv.py).

Observations (B envs; D, P depend on the task):
  "state":       float32 [B, 18]        Panda joint positions (9) then velocities (9)
  "privileged":  float32 [B, D + P]     ManiSkill's flattened "state" observation (starts with
                                        "state"; then tcp pose, object poses, goal, ...), then
                                        the physics state env.get_state() (poses and velocities
                                        of every actor and articulation)
  "rgb_front":   uint8   [B, H, W, 3]   ManiSkill's task camera, with obs_mode="rgb"
  "instruction": list[str] (B)          drawn per episode from the task's templates
Rewards (reward_mode, as in the MuJoCo suite): "staged" is ManiSkill's normalized dense reward
P(s') in [0, 1] (1 on success); "dense" is P(s') - P(s) + 1[success]; "sparse" is 1[success].
Auto-reset, final_obs, terminated (success or fail) / truncated (time limit), seeded per-env
resets and chunk_step behave exactly as in MujocoVecEnv. Domain randomisation (randomization /
reality) takes the knobs ManiSkill allows without a scene rebuild (sims/maniskill/randomization.py).
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

import numpy as np
import torch

from sims.maniskill import lavapipe
from sims.maniskill.randomization import MsRandomizer, resolve
from sims.maniskill.tasks import DEFAULT_CONTROL_MODE, MsTask, check_control_mode, instruction, parse_name
from sims.mujoco.seeding import parse_env_ids, parse_seeds, stream_from
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action

STATE_DIM = 18  # Panda qpos (7 arm + 2 fingers) and qvel
OBS_MODES = ("state", "rgb")
REWARD_MODES = ("dense", "staged", "sparse")
CAMERAS = ("front",)
INFO_KEYS = ("success", "fail")


def _size(field: str, value: Any) -> tuple[int, int]:
    h, w = (value, value) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    if not (8 <= h <= 1024 and 8 <= w <= 1024):
        raise EnvError(f"{field}: H and W must be in [8, 1024], got {(h, w)}")
    return int(h), int(w)


class ManiSkillVecEnv(VecEnv):
    """B ManiSkill envs of one task. task: "ms:<EnvId>[@<control_mode>]".

    obs_mode "state" | "rgb"; reward_mode "dense" | "staged" | "sparse"; image_size (H, W) of
    rgb observations; cameras: ("front",) only; render_size (H, W) of render() frames;
    control_mode (default pd_ee_delta_pose, actions in [-1, 1]); sim_backend "auto" (physx_cuda
    where CUDA is, else physx_cpu), "physx_cpu" or "physx_cuda"; render_backend "auto", "cpu",
    "gpu" or "none" (no rgb); num_threads: CPU worker processes (0: one per core, capped at B;
    1 keeps all envs in this process); seed: the episode stream until the first seeded reset;
    max_episode_steps: override the task's time limit. randomization / reality: a domain
    randomisation block or reality preset (docs/sim2real.md) of the knobs in
    sims/maniskill/randomization.py, drawn per env at every reset.
    """

    def __init__(self, task: str, num_envs: int, *, obs_mode: str = "state", reward_mode: str = "dense",
                 image_size: Sequence[int] | int = (64, 64), cameras: Sequence[str] | None = ("front",),
                 render_size: Sequence[int] | int = (128, 128), control_mode: str | None = None,
                 sim_backend: str = "auto", render_backend: str = "auto", num_threads: int = 0,
                 seed: int | None = None, max_episode_steps: int | None = None,
                 device: str | torch.device | None = None, randomization: Any = None, reality: Any = None):
        entry, name_mode = parse_name(task)
        self.task: MsTask = entry
        mode = check_control_mode(control_mode or name_mode or DEFAULT_CONTROL_MODE)
        for field, value, allowed in (("obs_mode", obs_mode, OBS_MODES), ("reward_mode", reward_mode, REWARD_MODES),
                                      ("sim_backend", sim_backend, ("auto", "physx_cpu", "physx_cuda")),
                                      ("render_backend", render_backend, ("auto", "cpu", "gpu", "none"))):
            if value not in allowed:
                raise EnvError(f"{field}: unknown value {value!r}; allowed: {', '.join(allowed)}")
        for cam in cameras or ():
            if cam not in CAMERAS:
                raise EnvError(f"cameras: unknown camera {cam!r}; ManiSkill tasks have: {', '.join(CAMERAS)}")
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise EnvError(f"num_envs: expected a positive int, got {num_envs!r}")
        if obs_mode == "rgb" and render_backend == "none":
            raise EnvError("obs_mode: 'rgb' needs a renderer, but render_backend='none'; use 'auto', 'cpu' or 'gpu'")
        vulkan = lavapipe.configure()
        if vulkan == "none":
            raise EnvError("ManiSkill needs Vulkan: no NVIDIA driver and no lavapipe in .cache/lavapipe; "
                           "run `make maniskill` (or python -m sims.maniskill.lavapipe)")
        cuda = torch.cuda.is_available()
        from sims.maniskill.backend import physx_gpu_error

        if sim_backend == "auto":  # physx_cuda where CUDA and SAPIEN's GPU PhysX are, else physx_cpu
            sim_backend = "physx_cuda" if cuda and physx_gpu_error() is None else "physx_cpu"
        if sim_backend == "physx_cuda" and not cuda:
            raise EnvError("sim_backend: physx_cuda needs a CUDA device; use physx_cpu")
        if sim_backend == "physx_cuda" and physx_gpu_error() is not None:
            raise EnvError(f"sim_backend: physx_cuda: {physx_gpu_error()}")
        if render_backend == "auto":
            render_backend = "gpu" if cuda else "cpu"
        dr = resolve(randomization, reality, sim_backend)  # before anything is built
        self.image_size, self.render_size = _size("image_size", image_size), _size("render_size", render_size)
        self.obs_mode, self.reward_mode, self.control_mode = obs_mode, reward_mode, mode
        opts = dict(rgb=obs_mode == "rgb", image_size=self.image_size, render_size=self.render_size,
                    control_mode=mode, sim_backend=sim_backend, render_backend=render_backend)
        from sims.maniskill.backend import GpuBackend, ProcBackend

        if sim_backend == "physx_cuda":
            self.backend: Any = GpuBackend(entry.env_id, int(num_envs), opts)
        else:
            workers = num_threads or len(os.sched_getaffinity(0))
            self.backend = ProcBackend(entry.env_id, int(num_envs), 0 if workers <= 1 else workers, opts)
        info = self.backend.spec
        if info["low"] != -1.0 or info["high"] != 1.0:
            self.close()
            raise EnvError(f"control_mode: {mode} has actions in [{info['low']}, {info['high']}], not [-1, 1]")
        self.device = torch.device(device) if device else torch.device(getattr(self.backend, "device", "cpu"))
        self._rng = np.random.default_rng(seed)
        self._seeded = False
        # counters and rewards live on the env's device (physx_cuda: the GPU); per step only the done
        # mask comes to the host, for the seeds and instructions of the envs that reset
        self._elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self._instr = [""] * int(num_envs)
        self._cur: dict[str, torch.Tensor] = {}  # latest rows of every env (obs parts, progress)
        self._grip = info["gripper_range"]
        self._dr = None if dr is None else MsRandomizer(dr, int(num_envs), info["action_dim"], seed,
                                                        self.backend.set_physics)
        seeds0 = self._draw(num_envs)
        first = self._backend_reset(np.arange(num_envs), seeds0, grouped=False, dr_seeds=None)
        steps = int(max_episode_steps or info["max_episode_steps"])
        self.spec = EnvSpec(task=task, num_envs=int(num_envs), action_dim=info["action_dim"], state_dim=STATE_DIM,
                            privileged_dim=first["ms_state"].shape[1] + first["physics"].shape[1],
                            max_episode_steps=steps, control_hz=info["control_hz"],
                            cameras=CAMERAS if obs_mode == "rgb" else (), image_size=self.image_size)
        self._cur = {k: v.clone() for k, v in first.items()}
        self._reset_done(np.arange(num_envs), first, seeds0)

    # ------------------------------------------------------------------ helpers
    def _draw(self, n: int) -> list[int]:
        return self._rng.integers(0, 2**31 - 1, n).tolist()

    def _backend_reset(self, ids: np.ndarray, seeds: list[int], grouped: bool,
                       dr_seeds: list[int] | None) -> dict[str, torch.Tensor]:
        """Reset envs ids in the backend; with randomisation, draw their values first (from
        dr_seeds, or the randomiser's stream) and fill their action queues with "hold"."""
        if self._dr is not None:
            self._dr.draw(ids, dr_seeds)
        rows = self.backend.reset(ids, seeds, grouped=grouped)
        if self._dr is not None:
            self._dr.reset_queue(ids, self._hold(rows["ms_state"]))
        return rows

    def _hold(self, ms_state: torch.Tensor) -> np.ndarray:
        """The "hold" actions [n, A] of envs in states ms_state: no arm motion (a zero delta),
        the gripper commanded to where its fingers are (the last action dim is absolute)."""
        lo, hi = self._grip
        hold = np.zeros((ms_state.shape[0], self.backend.spec["action_dim"]))
        finger = ms_state[:, 7].double().cpu().numpy()  # panda_finger_joint1
        hold[:, -1] = np.clip(2.0 * (finger - lo) / (hi - lo) - 1.0, -1.0, 1.0)
        return hold

    def _reset_done(self, ids: np.ndarray, rows: dict[str, torch.Tensor], seeds: list[int]) -> None:
        """Record freshly reset rows of envs ids (their counters, instructions, rows)."""
        idx = torch.as_tensor(ids, dtype=torch.long)
        for k, v in rows.items():
            self._cur[k][idx.to(v.device)] = v
        self._elapsed[idx.to(self._elapsed.device)] = 0
        for j, i in enumerate(ids):
            self._instr[i] = instruction(self.task, seeds[j])

    def _obs(self, rows: dict[str, torch.Tensor], instr: list[str]) -> Obs:
        ms = rows["ms_state"]
        out: Obs = {"state": ms[:, :STATE_DIM].contiguous(),
                    "privileged": torch.cat([ms, rows["physics"]], dim=1)}
        if self._dr is not None and self._dr.r.has("obs_noise"):
            noisy = {k: out[k].cpu().numpy() for k in ("state", "privileged")}
            self._dr.observe(noisy, None, STATE_DIM)
            out.update({k: torch.from_numpy(v).to(out[k].device) for k, v in noisy.items()})
        if self.obs_mode == "rgb":
            out["rgb_front"] = rows["rgb_front"]
        out = {k: v.to(self.device, copy=True) for k, v in out.items()}  # rows change in place
        out["instruction"] = list(instr)
        return out

    # ------------------------------------------------------------------ contract
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        ids = parse_env_ids(env_ids, self.num_envs)
        if seed is None:
            seeds = self._draw(len(ids))
        else:
            seeds = parse_seeds(seed, len(ids))
            if not self._seeded:
                self._rng, self._seeded = stream_from(seeds), True
                if self._dr is not None:
                    self._dr.reseed(seeds)
        if len(ids):
            rows = self._backend_reset(ids, seeds, grouped=seed is not None,
                                       dr_seeds=None if seed is None else seeds)
            self._reset_done(ids, rows, seeds)
        return self._obs(self._cur, self._instr), {}

    def _actions(self, action: torch.Tensor, chunk: bool = False) -> torch.Tensor:
        check_action(action, self.spec, chunk=chunk)
        return action.detach().float().clamp(-1.0, 1.0)

    def _advance(self, a: torch.Tensor, ids: np.ndarray):
        """One control step of envs ids with actions a [n, A] -> (rows, reward, term, trunc, info)."""
        if self._dr is not None and self._dr.r.has("latency_steps", "action_noise"):
            applied = self._dr.action(a.detach().cpu().double().numpy(), ids)
            a = torch.from_numpy(applied).to(a.device, torch.float32)
        rows = self.backend.step(a, ids)
        dev = self.device
        idx = torch.as_tensor(ids, dtype=torch.long).to(dev)
        self._elapsed[idx] += 1
        success, fail = rows["success"].to(dev), rows["fail"].to(dev)
        prog, prev = rows["progress"].to(dev), self._cur["progress"][idx.to(self._cur["progress"].device)].to(dev)
        if self.reward_mode == "dense":
            reward = prog - prev + success.float()
        elif self.reward_mode == "staged":
            reward = torch.where(success, torch.ones_like(prog), prog)
        else:
            reward = success.float()
        for k, v in rows.items():
            self._cur[k][idx.to(v.device)] = v
        term = success | fail
        trunc = (self._elapsed[idx] >= self.spec.max_episode_steps) & ~term
        info = {k: v.to(dev) for k, v in rows.items() if k not in ("ms_state", "physics", "rgb_front", "progress")}
        return rows, reward.float(), term, trunc, info

    def _auto_reset(self, done_ids: np.ndarray) -> None:
        seeds = self._draw(len(done_ids))
        rows = self._backend_reset(done_ids, seeds, grouped=False, dr_seeds=None)
        self._reset_done(done_ids, rows, seeds)

    def step(self, action: torch.Tensor) -> StepResult:
        a = self._actions(action)
        ids = np.arange(self.num_envs)
        _, reward, term, trunc, info = self._advance(a, ids)
        final = None
        done = term | trunc
        if done.any():
            final = self._obs(self._cur, self._instr)
            self._auto_reset(np.flatnonzero(done.cpu().numpy()))
        return StepResult(obs=self._obs(self._cur, self._instr), reward=reward, terminated=term,
                          truncated=trunc, info=info, final_obs=final)

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        a = self._actions(actions, chunk=True)
        B, K = a.shape[:2]
        dev = self.device
        reward = torch.zeros(B, K, device=dev)
        term, trunc, valid = (torch.zeros(B, K, dtype=torch.bool, device=dev) for _ in range(3))
        info: dict[str, torch.Tensor] = {}
        active = np.ones(B, bool)
        final_rows: dict[str, torch.Tensor] | None = None
        final_instr = list(self._instr)
        for k in range(K):
            ids = np.flatnonzero(active)
            if len(ids) == 0:
                break
            _, r, te, tr, inf = self._advance(a[torch.as_tensor(ids).to(a.device), k], ids)
            t_ids = torch.as_tensor(ids).to(dev)
            valid[t_ids, k], reward[t_ids, k], term[t_ids, k], trunc[t_ids, k] = True, r, te, tr
            for name, v in inf.items():
                info.setdefault(name, torch.zeros(B, K, dtype=v.dtype, device=dev))[t_ids, k] = v
            fin = ids[(te | tr).cpu().numpy()]
            if len(fin):
                if final_rows is None:
                    final_rows = {key: v.clone() for key, v in self._cur.items()}
                f = torch.as_tensor(fin)
                for key, v in self._cur.items():
                    final_rows[key][f.to(v.device)] = v[f.to(v.device)]
                active[fin] = False
        final = None
        if final_rows is not None:
            for key, v in self._cur.items():  # rows still running: their current state
                run = torch.as_tensor(np.flatnonzero(active), dtype=torch.long).to(v.device)
                final_rows[key][run] = v[run]
            final = self._obs(final_rows, final_instr)
            self._auto_reset(np.flatnonzero(~active))
        return ChunkStepResult(obs=self._obs(self._cur, self._instr), reward=reward, terminated=term,
                               truncated=trunc, info=info, valid=valid, final_obs=final)

    def state_dict(self) -> dict[str, Any]:
        """Physics states (env.get_state()), counters, instructions, progress and the seed stream.
        A restored env continues from the same states; PhysX solver caches are not saved, so
        the continuation is close to, not bit-identical with, the original."""
        return {"task": self.spec.task, "num_envs": self.num_envs,
                "physics": self._cur["physics"].cpu().numpy().copy(),
                "progress": self._cur["progress"].cpu().numpy().copy(),
                "elapsed_steps": self._elapsed.cpu().numpy().copy(), "instructions": list(self._instr),
                "rng_state": json.dumps(self._rng.bit_generator.state), "rng_seeded": int(self._seeded),
                **(self._dr.state_dict() if self._dr is not None else {})}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.spec.task or int(state.get("num_envs", -1)) != self.num_envs:
            raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                           f"this env is {self.spec.task} x {self.num_envs}")
        if (self._dr is None) != ("randomization.queue" not in state):
            raise EnvError("state_dict: saved with" + ("" if self._dr is None else "out")
                           + " domain randomisation; build the env with the same randomization/reality")
        if self._dr is not None:
            self._dr.load_state_dict(state)  # physics knobs first: restore() reads the states back
        ids = np.arange(self.num_envs)
        rows = self.backend.restore(torch.as_tensor(np.asarray(state["physics"], np.float32)), ids)
        for k, v in rows.items():
            self._cur[k][:] = v
        self._cur["progress"][:] = torch.as_tensor(np.asarray(state["progress"], np.float32))
        self._elapsed[:] = torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64))
        self._instr = [str(x) for x in state["instructions"]]
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(state["rng_state"])
        self._rng, self._seeded = rng, bool(int(state["rng_seeded"]))

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3] frames at render_size from ManiSkill's render camera."""
        return self.backend.render(parse_env_ids(env_ids, self.num_envs))

    def close(self) -> None:
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()
            self.backend = None
