"""LiberoVecEnv: LIBERO tasks behind our VecEnv contract (see sims/vecenv.py, docs/libero.md).

One worker process per env (sims/libero/worker.py, run by .venv-libero's interpreter), with
observations in shared memory. Observations (B envs):
  "state":       float32 [B, 8]         eef pos (3), eef axis-angle (3), gripper qpos (2)
  "privileged":  float32 [B, 14 + D]    the state, the positions of the two objects of the task's
                                        first goal predicate (pick, then place target: 6; zeros
                                        where the goal names none), then the flat MuJoCo state
                                        (time, qpos, qvel), zero-padded to the largest D of the batch
  "rgb_agentview", "rgb_wrist": uint8 [B, H, W, 3]  upright, with obs_mode="rgb"
  "instruction": list[str] (B)          the task's language (the one LIBERO checkpoints saw)
Actions: float32 [B, 7], OSC delta pose (6) and gripper (-1 open, +1 close), clipped to [-1, 1],
at 20 Hz. Reward (reward_mode): "sparse" (the default), 1 on success (LIBERO's check_success,
the BDDL goal), which terminates the episode; "dense", that plus the change of a staged potential
(reach, grasp, lift, carry over the target; sims/libero/worker.py) computed in the worker from the
sim state, for the pick-and-place goals ("on OBJECT TARGET"); success is the same in both.
`truncated` comes at the suite's max steps (counted after 10 settle steps). Resets: seed s starts from the task's official init state s mod 50 (layouts="official")
or from a layout drawn by LIBERO's placement samplers seeded with s (layouts="sampled").
chunk_step runs the whole chunk inside each worker and renders once, at its end.
A worker that dies is started again once per env (a RuntimeWarning names it); its episode ends
truncated, with the last observation before the death as the final one. A second death of the
same env's worker raises one line naming the task.
"""

from __future__ import annotations

import json
import time
import warnings
from typing import Any, Sequence

import numpy as np
import torch

from sims.libero.proc import WorkerDied, WorkerProc
from sims.libero.tasks import SETTLE_STEPS, SUITES, parse_name, split_layouts
from sims.mujoco.seeding import parse_env_ids, parse_seeds, stream_from
from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action

STATE_DIM = 8
OBJ_DIM = 6  # pick object xyz, place target xyz
SIM_START = STATE_DIM + OBJ_DIM  # where the flat MuJoCo state starts in "privileged"
ACTION_DIM = 7
CAMERAS = {"agentview": "agentview", "wrist": "robot0_eye_in_hand"}  # our name -> LIBERO's
OBS_MODES = ("state", "rgb")
LAYOUTS = ("official", "sampled")
REWARD_MODES = ("sparse", "dense")


def _size(value: Any) -> tuple[int, int]:
    h, w = (value, value) if isinstance(value, (int, np.integer)) else tuple(int(v) for v in value)
    if not (8 <= h <= 1024 and 8 <= w <= 1024):
        raise EnvError(f"image_size: H and W must be in [8, 1024], got {(h, w)}")
    return int(h), int(w)


class LiberoVecEnv(VecEnv):
    """B LIBERO envs. task: "libero:SUITE/TASK" (TASK: index or name) or "libero:SUITE" (env i
    runs task i mod n_tasks); a name ending in "@sampled" or "@official" sets `layouts`. obs_mode
    "state" | "rgb"; reward_mode "sparse" | "dense" (module doc); cameras: subset of ("agentview",
    "wrist"); image_size (H, W); layouts "official" | "sampled"; seed: the stream of unseeded
    resets; max_episode_steps: default the suite's; settle_steps: no-op steps after each reset;
    start_timeout: seconds for the workers to build their envs. num_threads (env.num_threads of a
    config) is accepted and has no effect: each env is its own single-threaded process."""

    def __init__(self, task: str, num_envs: int, *, obs_mode: str = "state", reward_mode: str = "sparse",
                 image_size: Sequence[int] | int = (128, 128), cameras: Sequence[str] | None = ("agentview", "wrist"),
                 layouts: str = "official", seed: int | None = None, max_episode_steps: int | None = None,
                 settle_steps: int = SETTLE_STEPS, start_timeout: float = 600.0,
                 device: str | torch.device | None = None, num_threads: int | None = None):
        self.workers: list[WorkerProc] = []
        suite, sub = parse_name(task)
        layouts = split_layouts(task)[1] or layouts
        for field, value, allowed in (("obs_mode", obs_mode, OBS_MODES), ("reward_mode", reward_mode, REWARD_MODES),
                                      ("layouts", layouts, LAYOUTS)):
            if value not in allowed:
                raise EnvError(f"{field}: unknown value {value!r}; allowed: {', '.join(allowed)}")
        if not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise EnvError(f"num_envs: expected a positive int, got {num_envs!r}")
        cams = tuple(cameras or ()) if obs_mode == "rgb" else ()
        for cam in cams:
            if cam not in CAMERAS:
                raise EnvError(f"cameras: unknown camera {cam!r}; LIBERO has: {', '.join(CAMERAS)}")
        if obs_mode == "rgb" and not cams:
            raise EnvError("cameras: obs_mode='rgb' needs at least one of: agentview, wrist")
        steps = int(max_episode_steps or SUITES[suite][1])
        if steps < 1:
            raise EnvError(f"max_episode_steps: expected a positive int, got {max_episode_steps!r}")
        self.image_size, self.cameras, self.layouts = _size(image_size), cams, layouts
        self.reward_mode = reward_mode
        self.device = torch.device(device) if device else torch.device("cpu")
        B, (h, w) = int(num_envs), self.image_size
        self._start_timeout = float(start_timeout)
        n_tasks = SUITES[suite][0]
        try:
            for i in range(B):
                t = sub if sub is not None else str(i % n_tasks)
                self.workers.append(WorkerProc(f"{suite}/{t} (env {i})", suite, t, h, w,
                                               [CAMERAS[c] for c in cams], settle_steps))
            deadline = time.monotonic() + start_timeout
            infos = [wk.wait_ready(max(deadline - time.monotonic(), 1.0)) for wk in self.workers]
        except BaseException:
            self.close()
            raise
        self.task_names = [inf["task_name"] for inf in infos]
        self._instr = [inf["instruction"] for inf in infos]
        self._num_inits = [inf["num_init_states"] for inf in infos]
        sim_dim = max(inf["sim_dim"] for inf in infos)
        self.spec = EnvSpec(task=task, num_envs=B, action_dim=ACTION_DIM, state_dim=STATE_DIM,
                            privileged_dim=SIM_START + sim_dim, max_episode_steps=steps,
                            control_hz=infos[0]["control_hz"], cameras=cams, image_size=self.image_size)
        self._state = torch.zeros(B, STATE_DIM)
        self._priv = torch.zeros(B, SIM_START + sim_dim)
        self._img = {c: torch.zeros(B, h, w, 3, dtype=torch.uint8) for c in cams}
        self._elapsed = torch.zeros(B, dtype=torch.long)
        self.restarts = [0] * B  # workers started again after a death, per env (at most 1)
        self._lost: dict[int, tuple] = {}  # env -> its observation when its worker died
        self._rng = np.random.default_rng(seed)
        self._seeded = False
        self._reset_ids(np.arange(B), self._draw(B))

    # ------------------------------------------------------------------ helpers
    def _draw(self, n: int) -> list[int]:
        return self._rng.integers(0, 2**31 - 1, n).tolist()

    def _gather(self, ids: Sequence[int]) -> None:
        """Copy the workers' shared-memory observations of envs ids into the batch rows."""
        for i in ids:
            wk = self.workers[i]
            self._state[i] = torch.from_numpy(wk.state)
            self._priv[i, :STATE_DIM] = self._state[i]
            self._priv[i, STATE_DIM:SIM_START] = torch.from_numpy(wk.objects)
            self._priv[i, SIM_START:SIM_START + len(wk.sim)] = torch.from_numpy(wk.sim.astype(np.float32))
            for c, cam in enumerate(self.cameras):
                self._img[cam][i] = torch.from_numpy(wk.images[c])

    def _reset_req(self, i: int, s: int) -> dict:
        req = {"op": "reset", "render": bool(self.cameras)}
        if self.layouts == "official":
            req["init"] = int(s) % self._num_inits[i]
        else:
            req["layout_seed"] = int(s) % 2**32
        return req

    def _reset_ids(self, ids: np.ndarray, seeds: list[int]) -> None:
        self._exchange({int(i): self._reset_req(int(i), s) for i, s in zip(ids, seeds)}, retry=True)
        self._elapsed[torch.as_tensor(ids, dtype=torch.long)] = 0
        self._gather(ids)

    def _exchange(self, reqs: dict[int, dict], retry: bool) -> tuple[dict[int, dict], list[int]]:
        """Send reqs[i] to worker i for all i, then read every reply (the workers run in
        parallel). A worker that died is started again (_revive); with retry its request is sent
        again. Returns (replies, the envs whose worker was started again without a reply)."""
        dead: dict[int, WorkerDied] = {}
        for i, req in reqs.items():
            try:
                self.workers[i].send(req)
            except WorkerDied as e:
                dead[i] = e
        replies = {}
        for i in reqs:
            if i not in dead:
                try:
                    replies[i] = self._checked(i, self.workers[i].recv())
                except WorkerDied as e:
                    dead[i] = e
        for i, err in dead.items():
            self._revive(i, err)
            if retry:
                replies[i] = self._exchange({i: reqs[i]}, retry=True)[0][i]
        return replies, [] if retry else sorted(dead)

    def _revive(self, i: int, err: WorkerDied) -> None:
        """Start env i's worker again (once per env) and reset it from a fresh seed; a second
        death raises one line naming the task."""
        if self.restarts[i] >= 1:
            raise EnvError(f"{err} (its worker had been started again once already)")
        self.restarts[i] += 1
        old = self.workers[i]
        old.close()
        warnings.warn(f"{err}; starting it again (once)", RuntimeWarning, stacklevel=3)
        self.workers[i] = WorkerProc(*old.args)
        try:
            info = self.workers[i].wait_ready(self._start_timeout)
            self._checked(i, self.workers[i].call(self._reset_req(i, self._draw(1)[0])))
        except WorkerDied as e:
            raise EnvError(f"{e} (while starting it again)") from None
        if info["sim_dim"] + SIM_START > self._priv.shape[1]:
            raise EnvError(f"libero: worker {old.name} came back with sim_dim {info['sim_dim']}, "
                           f"allowed: at most {self._priv.shape[1] - SIM_START}")
        self._lost[i] = (self._state[i].clone(), self._priv[i].clone(), {c: self._img[c][i].clone() for c in self.cameras})
        self._elapsed[i] = 0
        self._gather([i])

    def _checked(self, i: int, reply: dict) -> dict:
        if not reply.get("ok"):
            raise EnvError(f"libero: worker {self.workers[i].name}: {reply.get('reason')}")
        return reply

    def _obs(self) -> Obs:
        out: Obs = {"state": self._state.to(self.device, copy=True), "privileged": self._priv.to(self.device, copy=True)}
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
        a = actions.detach().cpu().double().clamp(-1.0, 1.0).numpy()  # [B, K, 7]
        B, K = a.shape[:2]
        T = self.spec.max_episode_steps
        replies, revived = self._exchange(
            {i: {"op": "step", "actions": a[i].tolist(), "limit": int(T - self._elapsed[i]),
                 "render": bool(self.cameras), "dense": self.reward_mode == "dense"} for i in range(B)},
            retry=False)
        success = torch.zeros(B, K, dtype=torch.bool)
        reward = torch.zeros(B, K)
        term, trunc, valid = (torch.zeros(B, K, dtype=torch.bool) for _ in range(3))
        for i, rep in replies.items():
            n = rep["n"]
            valid[i, :n] = True
            success[i, :n] = torch.tensor(rep["success"], dtype=torch.bool)
            reward[i, :n] = torch.tensor(rep["reward"]) if "reward" in rep else success[i, :n].float()
            self._elapsed[i] += n
            term[i, n - 1] = bool(rep["success"][-1])
            trunc[i, n - 1] = bool(self._elapsed[i] >= T) and not term[i, n - 1]
        for i in revived:  # the episode ended with the worker; it was started again and reset
            valid[i, 0] = trunc[i, 0] = True
        self._gather(sorted(replies))
        done = (term | trunc).any(dim=1)
        final = None
        if done.any():
            final = self._obs()
            for i in revived:  # its last observation before the worker died
                final["state"][i], final["privileged"][i] = self._lost[i][0], self._lost[i][1]
                for cam in self.cameras:
                    final[f"rgb_{cam}"][i] = self._lost[i][2][cam]
            stepped = np.flatnonzero(done.numpy() & ~np.isin(np.arange(B), revived))
            self._reset_ids(stepped, self._draw(len(stepped)))
        return ChunkStepResult(obs=self._obs(), reward=reward, terminated=term, truncated=trunc,
                               info={"success": success}, valid=valid, final_obs=final)

    def step(self, action: torch.Tensor) -> StepResult:
        check_action(action, self.spec)
        r = self.chunk_step(action[:, None])
        return StepResult(obs=r.obs, reward=r.reward[:, 0], terminated=r.terminated[:, 0],
                          truncated=r.truncated[:, 0], info={k: v[:, 0] for k, v in r.info.items()},
                          final_obs=r.final_obs)

    def state_dict(self) -> dict[str, Any]:
        """Each worker's flat MuJoCo state, qacc_warmstart, gripper action and timestep, plus the
        counters and the seed stream: a restored env continues bit-identically."""
        sims = [r for _, r in sorted(self._exchange({i: {"op": "get_state"} for i in range(self.num_envs)},
                                                    retry=True)[0].items())]
        return {"task": self.spec.task, "num_envs": self.num_envs,
                "workers": json.dumps([{k: v for k, v in s.items() if k != "ok"} for s in sims]),
                "elapsed_steps": self._elapsed.numpy().copy(),
                "rng_state": json.dumps(self._rng.bit_generator.state), "rng_seeded": int(self._seeded)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("task") != self.spec.task or int(state.get("num_envs", -1)) != self.num_envs:
            raise EnvError(f"state_dict: saved for {state.get('task')} x {state.get('num_envs')}, "
                           f"this env is {self.spec.task} x {self.num_envs}")
        self._exchange({i: {"op": "set_state", **s, "render": bool(self.cameras)}
                        for i, s in enumerate(json.loads(state["workers"]))}, retry=True)
        self._gather(range(self.num_envs))
        self._elapsed[:] = torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64))
        rng = np.random.default_rng()
        rng.bit_generator.state = json.loads(state["rng_state"])
        self._rng, self._seeded = rng, bool(int(state["rng_seeded"]))

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3]: the latest frames of `camera` (default: the first camera)."""
        if not self.cameras:
            raise EnvError("render: this LIBERO env has no cameras; make it with obs_mode='rgb'")
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
