"""MetaWorldVecEnv: MetaWorld 3.1.1 behind our VecEnv contract (see sims/vecenv.py, docs/metaworld.md).

The B envs live in W worker processes (sims/metaworld/worker.py, run by .venv-metaworld's
interpreter; worker k holds a contiguous block of envs); observations travel in shared memory.
Observations (B envs):
  "state":       float32 [B, 4]          hand xyz, gripper opening in [0, 1] (MetaWorld's obs[0:4]);
                 float32 [B, 7]          with a task name ending in "@goal": then the goal's xyz
                                         (obs[36:39]), which a 64 px frame shows as 2-3 pixels
  "privileged":  float32 [B, 39 + N]     MetaWorld's observation with the goal visible (hand,
                                         gripper, objects, the previous frame of them, goal),
                                         then a one-hot of the env's task among the N tasks of
                                         the benchmark (N = 10 for MT10 and MT10/<task>, 50 for
                                         MT50 and MT50/<task>, 0 for metaworld:<task>)
  "rgb_<cam>":   uint8 [B, H, W, 3]      with obs_mode="rgb": mujoco's own Renderer (one per
                                         task per worker), no multisampling, shadows or
                                         reflections; upright
  "instruction": list[str] (B)           the env's task phrase (sims/metaworld/tasks.py)
Actions: float32 [B, 4], the hand's xyz displacement (x 1 cm) and the gripper effort, clipped to
[-1, 1], at 80 Hz (5 physics steps of 2.5 ms). Success: MetaWorld's info["success"]; it
terminates the episode. `truncated` at max_episode_steps (default MetaWorld's max path length,
500). Reward (reward_mode), with S_t MetaWorld's own shaped reward (0-10) of step t over 10 and
S_0 that of the reset state (zero action):
  "sparse" (the default): 1[success]
  "dense":  S_t - S_t-1 + 1[success], potential-based shaping plus a success bonus, as the
            MuJoCo tasks' dense reward: an episode's return is S_T - S_0 + 1[success], so hovering
            short of success pays nothing (MetaWorld's own reward does not end episodes on success)
  "staged": S_t, MetaWorld's reward as it is; with episodes that end on success it pays to hover.
Resets: seed s seeds the env's generator, from which MetaWorld
draws the layout (object and goal positions): equal seeds give equal episodes, whatever the env
index or the worker. chunk_step runs the whole chunk inside the workers and renders once, at its end.
A worker that dies raises one line naming it and the last line of its stderr.
"""

from __future__ import annotations

import json
import time
from typing import Any, Sequence

import numpy as np
import torch

from sims.metaworld.proc import OBS_DIM, WorkerProc
from sims.metaworld.tasks import CAMERAS, INSTRUCTIONS, MAX_PATH_LENGTH, parse_name, split_variant
from sims.mujoco.seeding import parse_env_ids, parse_seeds, stream_from
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action

STATE_DIM = 4  # hand xyz, gripper
GOAL_SLICE = slice(36, 39)  # the goal's xyz in MetaWorld's observation
ACTION_DIM = 4
OBS_MODES = ("state", "rgb")
REWARD_MODES = ("sparse", "dense", "staged")
DEFAULT_CAMERAS = CAMERAS[:1]  # corner2


def _size(value: Any) -> tuple[int, int]:
    h, w = (value, value) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    if not (8 <= h <= 1024 and 8 <= w <= 1024):
        raise EnvError(f"image_size: H and W must be in [8, 1024], got {(h, w)}")
    return int(h), int(w)


class MetaWorldVecEnv(VecEnv):
    """B MetaWorld envs. task: "metaworld:MT10", "metaworld:MT50" (env i runs task i mod N),
    "metaworld:MT10/<task>" (one task, the benchmark's one-hot) or "metaworld:<task>", each with an
    optional "@goal" (the goal's xyz in the state); obs_mode "state" | "rgb"; reward_mode "sparse" |
    "dense" | "staged" (module doc);
    cameras: MetaWorld's camera names (corner, corner2, corner3, corner4, topview, behindGripper,
    gripperPOV); image_size (H, W); seed: the stream of unseeded resets; num_workers: processes
    (default min(B, 2)); start_timeout: seconds for the workers to build their envs. num_threads
    (env.num_threads of a config) is accepted and has no effect."""

    def __init__(self, task: str, num_envs: int, *, obs_mode: str = "state", reward_mode: str = "sparse",
                 image_size: Sequence[int] | int = (64, 64), cameras: Sequence[str] | None = DEFAULT_CAMERAS,
                 seed: int | None = None, max_episode_steps: int | None = None, num_workers: int | None = None,
                 start_timeout: float = 300.0, device: str | torch.device | None = None,
                 num_threads: int | None = None):
        self.workers: list[WorkerProc] = []
        suite, tasks = parse_name(task)
        self.goal_in_state = split_variant(task)[1]
        for field, value, allowed in (("obs_mode", obs_mode, OBS_MODES), ("reward_mode", reward_mode, REWARD_MODES)):
            if value not in allowed:
                raise EnvError(f"{field}: unknown value {value!r}; allowed: {', '.join(allowed)}")
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise EnvError(f"num_envs: expected a positive int, got {num_envs!r}")
        cams = tuple(cameras or ()) if obs_mode == "rgb" else ()
        if obs_mode == "rgb" and not cams:
            raise EnvError("cameras: obs_mode='rgb' needs at least one camera, e.g. corner2")
        for cam in cams:
            if cam not in CAMERAS:
                raise EnvError(f"cameras: unknown camera {cam!r}; MetaWorld has: {', '.join(CAMERAS)}")
        steps = int(max_episode_steps or MAX_PATH_LENGTH)
        if not 1 <= steps <= MAX_PATH_LENGTH:
            raise EnvError(f"max_episode_steps: {max_episode_steps!r}; allowed: 1..{MAX_PATH_LENGTH} "
                           f"(MetaWorld's max path length)")
        B = int(num_envs)
        W = int(num_workers or min(B, 2))
        if not 1 <= W <= B:
            raise EnvError(f"num_workers: {num_workers!r}; allowed: 1..{B} (the number of envs)")
        self.image_size, self.cameras, self.reward_mode = _size(image_size), cams, reward_mode
        self.device = torch.device(device) if device else torch.device("cpu")
        self.task_names = [tasks[i % len(tasks)] for i in range(B)]
        self.suite_tasks = suite
        self.blocks = [b.tolist() for b in np.array_split(np.arange(B), W)]  # worker k -> its envs
        self.where = {i: (k, j) for k, blk in enumerate(self.blocks) for j, i in enumerate(blk)}
        (h, w) = self.image_size
        try:
            for k, blk in enumerate(self.blocks):
                names = [self.task_names[i] for i in blk]
                self.workers.append(WorkerProc(f"{k} ({', '.join(dict.fromkeys(names))})", names, h, w, list(cams)))
            deadline = time.monotonic() + start_timeout
            infos = [wk.wait_ready(max(deadline - time.monotonic(), 1.0)) for wk in self.workers]
        except BaseException:
            self.close()
            raise
        n_hot = len(self.suite_tasks)
        state_dim = STATE_DIM + (GOAL_SLICE.stop - GOAL_SLICE.start) * self.goal_in_state
        self.spec = EnvSpec(task=task, num_envs=B, action_dim=ACTION_DIM, state_dim=state_dim,
                            privileged_dim=OBS_DIM + n_hot, max_episode_steps=steps,
                            control_hz=float(infos[0]["control_hz"]), cameras=cams, image_size=self.image_size)
        self._instr = [INSTRUCTIONS[t] for t in self.task_names]
        self._priv = torch.zeros(B, OBS_DIM + n_hot)
        for i, t in enumerate(self.task_names):
            if n_hot:
                self._priv[i, OBS_DIM + self.suite_tasks.index(t)] = 1.0
        self._img = {c: torch.zeros(B, h, w, 3, dtype=torch.uint8) for c in cams}
        self._elapsed = torch.zeros(B, dtype=torch.long)
        self._rng = np.random.default_rng(seed)
        self._seeded = False
        self._reset_ids(np.arange(B), self._draw(B))

    # ------------------------------------------------------------------ helpers
    def _draw(self, n: int) -> list[int]:
        return self._rng.integers(0, 2**31 - 1, n).tolist()

    def _gather(self, ids: Sequence[int]) -> None:
        """Copy the workers' shared-memory observations of envs ids into the batch rows."""
        for i in ids:
            k, j = self.where[int(i)]
            wk = self.workers[k]
            self._priv[i, :OBS_DIM] = torch.from_numpy(wk.obs[j].astype(np.float32))
            for c, cam in enumerate(self.cameras):
                self._img[cam][i] = torch.from_numpy(wk.images[j, c])

    def _broadcast(self, reqs: dict[int, dict]) -> dict[int, dict]:
        """Send reqs[k] to worker k for all k, then read every reply (the workers run in parallel)."""
        for k, req in reqs.items():
            self.workers[k].send(req)
        return {k: self.workers[k].recv() for k in reqs}

    def _reset_ids(self, ids: np.ndarray, seeds: list[int]) -> None:
        per: dict[int, list] = {}
        for i, s in zip(ids, seeds):
            k, j = self.where[int(i)]
            per.setdefault(k, []).append([j, int(s)])
        self._broadcast({k: {"op": "reset", "envs": e, "render": bool(self.cameras)} for k, e in per.items()})
        self._elapsed[torch.as_tensor(np.asarray(ids, np.int64))] = 0
        self._gather(ids)

    def _obs(self) -> Obs:
        state = self._priv[:, :STATE_DIM]
        if self.goal_in_state:
            state = torch.cat([state, self._priv[:, GOAL_SLICE]], dim=1)
        out: Obs = {"state": state.to(self.device, copy=True),
                    "privileged": self._priv.to(self.device, copy=True)}
        for cam in self.cameras:
            out[f"rgb_{cam}"] = self._img[cam].to(self.device, copy=True)
        out["instruction"] = list(self._instr)
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
        if len(ids):
            self._reset_ids(ids, seeds)
        return self._obs(), {}

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        check_action(actions, self.spec, chunk=True)
        a = actions.detach().cpu().double().clamp(-1.0, 1.0).numpy()  # [B, K, 4]
        B, K = a.shape[:2]
        T = self.spec.max_episode_steps
        reqs = {k: {"op": "step", "render": bool(self.cameras),
                    "actions": {str(j): a[i].tolist() for j, i in enumerate(blk)},
                    "limits": {str(j): int(T - self._elapsed[i]) for j, i in enumerate(blk)}}
                for k, blk in enumerate(self.blocks)}
        replies = self._broadcast(reqs)
        success = torch.zeros(B, K, dtype=torch.bool)
        reward = torch.zeros(B, K)
        term, trunc, valid = (torch.zeros(B, K, dtype=torch.bool) for _ in range(3))
        for k, blk in enumerate(self.blocks):
            for j, i in enumerate(blk):
                rep = replies[k]["res"][str(j)]
                n = rep["n"]
                valid[i, :n] = True
                success[i, :n] = torch.tensor(rep["success"], dtype=torch.bool)
                reward[i, :n] = self._reward(rep, success[i, :n])
                self._elapsed[i] += n
                term[i, n - 1] = bool(rep["success"][-1])
                trunc[i, n - 1] = bool(self._elapsed[i] >= T) and not term[i, n - 1]
        self._gather(range(B))
        done = (term | trunc).any(dim=1)
        final = None
        if done.any():
            final = self._obs()
            ids = np.flatnonzero(done.numpy())
            self._reset_ids(ids, self._draw(len(ids)))
        return ChunkStepResult(obs=self._obs(), reward=reward, terminated=term, truncated=trunc,
                               info={"success": success}, valid=valid, final_obs=final)

    def _reward(self, rep: dict, success: torch.Tensor) -> torch.Tensor:
        """float [n]: one worker reply's rewards of n executed steps under self.reward_mode."""
        if self.reward_mode == "sparse":
            return success.float()
        staged = torch.tensor(rep["reward"], dtype=torch.float64)  # S_1..S_n
        if self.reward_mode == "staged":
            return staged.float()
        before = torch.cat([torch.tensor([rep["start"]], dtype=torch.float64), staged[:-1]])  # S_0..S_n-1
        return (staged - before + success.double()).float()

    def step(self, action: torch.Tensor) -> StepResult:
        check_action(action, self.spec)
        r = self.chunk_step(action[:, None])
        return StepResult(obs=r.obs, reward=r.reward[:, 0], terminated=r.terminated[:, 0],
                          truncated=r.truncated[:, 0], info={k: v[:, 0] for k, v in r.info.items()},
                          final_obs=r.final_obs)

    def state_dict(self) -> dict[str, Any]:
        """Each env's MuJoCo integration state and plain Python attributes (worker.py), plus the
        step counters and the seed stream: a restored env continues bit-identically."""
        states = self._broadcast({k: {"op": "get_state"} for k in range(len(self.workers))})
        return {"task": self.spec.task, "num_envs": self.num_envs, "blocks": json.dumps(self.blocks),
                "workers": json.dumps([states[k]["envs"] for k in range(len(self.workers))]),
                "elapsed_steps": self._elapsed.numpy().copy(),
                "rng_state": json.dumps(self._rng.bit_generator.state), "rng_seeded": int(self._seeded)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.spec.task or int(state.get("num_envs", -1)) != self.num_envs:
            raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                           f"this env is {self.spec.task} x {self.num_envs}")
        if json.loads(state["blocks"]) != self.blocks:
            raise EnvError(f"state_dict: saved with workers holding envs {state['blocks']}, this env's hold "
                           f"{self.blocks}; make it with the same num_workers")
        saved = json.loads(state["workers"])
        self._broadcast({k: {"op": "set_state", "envs": saved[k], "render": bool(self.cameras)}
                         for k in range(len(self.workers))})
        self._gather(range(self.num_envs))
        self._elapsed[:] = torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64))
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(state["rng_state"])
        self._rng, self._seeded = rng, bool(int(state["rng_seeded"]))

    def task_labels(self) -> list[str]:
        return list(self.task_names)

    @property
    def row_tasks(self) -> tuple[str, ...]:
        return tuple(self.task_names)

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3]: the latest frames of `camera` (default: the first camera)."""
        if not self.cameras:
            raise EnvError("render: this MetaWorld env has no cameras; make it with obs_mode='rgb'")
        cam = camera or self.cameras[0]
        if cam not in self.cameras:
            raise EnvError(f"camera: {cam!r} is not rendered by this env; allowed: {', '.join(self.cameras)}")
        return self._img[cam][torch.as_tensor(parse_env_ids(env_ids, self.num_envs))].clone()

    def close(self) -> None:
        for wk in getattr(self, "workers", []):
            wk.close()
        self.workers = []

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
