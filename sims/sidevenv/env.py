"""SideVenvVecEnv: B envs in W worker processes of a side venv, behind our VecEnv contract.

Worker k holds the contiguous block of envs `blocks[k]`; its observation rows and frames are in
shared memory (sims/sidevenv/worker.py), gathered into the batch after each request. A family's
env (sims/libero/env.py, sims/metaworld/env.py) subclasses this with what differs: the worker
script and its arguments, the state columns, the reward, the request extras. Here: checks of
the common arguments, start and stop, seeded resets (seed s goes to the worker, which makes equal
seeds give equal episodes), chunks run inside the workers (rendered once, at the chunk's end),
ManiSkill-style auto-reset, state_dict, render, and a worker that dies: started again up to
`max_restarts` times per worker (its envs' episodes end truncated, their last observation as the
final one; a RuntimeWarning names it), else one line naming it and its stderr's last line.
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from sims.env_args import check_choice, check_common, parse_size, render_camera
from sims.mujoco.seeding import parse_env_ids
from sims.seed_stream import SeedStream
from sims.sidevenv.proc import SideVenv, WorkerDied, WorkerProc
from sims.vecenv import (ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action,
                         check_saved_for, step_as_chunk)


class SideVenvVecEnv(SeedStream, VecEnv):
    """The shared part of a side-venv env (module doc). A subclass sets side, script, label,
    camera_names (ours -> the simulator's), max_restarts, and implements _state and _rewards."""

    side: SideVenv
    script: Path
    label = "this simulator"  # "LIBERO": in messages
    camera_names: dict[str, str] = {}
    max_restarts = 0
    _columns: list[int] | None = None  # the worker's observation columns, in "privileged" order (None: as they are)

    # ------------------------------------------------------------------ set-up, for __init__
    def _check(self, num_envs: Any, obs_mode: str, reward_mode: str, reward_modes: Sequence[str],
               cameras: Sequence[str] | None, size: Any) -> tuple[int, tuple[str, ...], tuple[int, int]]:
        """(B, cameras, (H, W)) from the common arguments; one-line EnvError naming a bad one."""
        self.workers: list[WorkerProc] = []
        B, cams = check_common(num_envs, obs_mode, cameras or (), self.camera_names, self.label,
                               f"at least one of: {', '.join(self.camera_names)}")
        check_choice("reward_mode", reward_mode, reward_modes)
        return B, cams, parse_size("image_size", size)

    def _start(self, blocks: list[list[int]], names: list[str], args: list[list[str]], timeout: float) -> list[dict]:
        """Start one worker per block (names[k], its script arguments args[k]) and wait for every
        hello frame; the infos, in order. Closes what started on any failure."""
        self.blocks = blocks
        self.where = {i: (k, j) for k, blk in enumerate(blocks) for j, i in enumerate(blk)}
        self.restarts = [0] * len(blocks)  # workers started again after a death
        self._start_timeout = float(timeout)
        try:
            for name, a in zip(names, args):
                self.workers.append(WorkerProc(self.side, name, self.script, a))
            deadline = time.monotonic() + timeout
            return [wk.wait_ready(max(deadline - time.monotonic(), 1.0)) for wk in self.workers]
        except BaseException:
            self.close()
            raise

    def _finish(self, spec: EnvSpec, instructions: list[str], priv: torch.Tensor, seed: int | None) -> None:
        """The spec, the batch buffers (priv float32 [B, P], already holding any fixed columns)
        and the first reset of every env from the seed stream."""
        self.spec, self._instr, self._priv = spec, list(instructions), priv
        B, (h, w) = spec.num_envs, spec.image_size
        self.cameras = spec.cameras
        self._img = {c: torch.zeros(B, h, w, 3, dtype=torch.uint8) for c in spec.cameras}
        self._elapsed = torch.zeros(B, dtype=torch.long)
        self._lost: dict[int, tuple] = {}  # env -> its observation when its worker died
        self._start_stream(seed)
        self._reset_ids(np.arange(B), self._draw(B))

    # ------------------------------------------------------------------ a family's part
    def _state(self, priv: torch.Tensor) -> torch.Tensor:
        """float32 [B, S]: the policy's state from the privileged rows [B, P]."""
        raise NotImplementedError

    def _rewards(self, k: int, reply: dict, success: torch.Tensor) -> np.ndarray:
        """float [E, K]: worker k's rewards from its step reply (success bool [E, K])."""
        return reply["reward"]

    def _request(self, op: str) -> dict:
        """Extras of every `op` request ("reset", "step")."""
        return {}

    # ------------------------------------------------------------------ helpers
    def _gather(self, ids: Sequence[int]) -> None:
        """Copy the workers' shared-memory rows of envs ids into the batch."""
        per: dict[int, tuple[list[int], list[int]]] = {}
        for i in ids:
            k, j = self.where[int(i)]
            rows, js = per.setdefault(k, ([], []))
            rows.append(int(i))
            js.append(j)
        for k, (rows, js) in per.items():
            wk = self.workers[k]
            run = rows == list(range(rows[0], rows[0] + len(rows))) and js == list(range(js[0], js[0] + len(js)))
            # a contiguous run of rows (a whole block, after a step) is copied as one slice
            dst = slice(rows[0], rows[0] + len(rows)) if run else rows
            src = slice(js[0], js[0] + len(js)) if run else js
            obs = wk.obs[src]
            if self._columns is not None:  # the privileged order of the worker's columns
                obs = obs[:, self._columns]
            self._priv[dst, :obs.shape[1]] = torch.from_numpy(np.asarray(obs, np.float32))
            for c, cam in enumerate(self.cameras):
                if run:
                    self._img[cam][dst].copy_(torch.from_numpy(wk.images[src, c]))
                else:
                    for i, j in zip(rows, js):
                        self._img[cam][i].copy_(torch.from_numpy(wk.images[j, c]))

    def _exchange(self, reqs: dict[int, dict], retry: bool) -> tuple[dict[int, dict], list[int]]:
        """Send reqs[k] to worker k for all k, then read every reply (the workers run in
        parallel). A worker that died is started again (_revive; at most max_restarts times); with
        retry its request is sent again. Returns (replies, the workers started again without a reply)."""
        dead: dict[int, WorkerDied] = {}
        for k, req in reqs.items():
            try:
                self.workers[k].send(req)
            except WorkerDied as e:
                dead[k] = e
        replies = {}
        for k in reqs:
            if k not in dead:
                try:
                    replies[k] = self.workers[k].recv()
                except WorkerDied as e:
                    dead[k] = e
        for k, err in dead.items():
            self._revive(k, err)
            if retry:
                replies[k] = self._exchange({k: reqs[k]}, retry=True)[0][k]
        return replies, [] if retry else sorted(dead)

    def _revive(self, k: int, err: WorkerDied) -> None:
        """Start worker k again and reset its envs from fresh seeds; past max_restarts, raise."""
        if self.max_restarts == 0:
            raise err
        if self.restarts[k] >= self.max_restarts:
            raise EnvError(f"{err} (its worker had been started again once already)")
        self.restarts[k] += 1
        old = self.workers[k]
        old.close()
        warnings.warn(f"{err}; starting it again (once)", RuntimeWarning, stacklevel=4)
        self.workers[k] = WorkerProc(*old.spawn)
        blk = self.blocks[k]
        try:
            info = self.workers[k].wait_ready(self._start_timeout)
            self.workers[k].call({"op": "reset", "envs": [[j, s] for j, s in enumerate(self._draw(len(blk)))],
                                  "render": bool(self.cameras), **self._request("reset")})
        except WorkerDied as e:
            raise EnvError(f"{e} (while starting it again)") from None
        width = info["arrays"]["obs"][1][1]
        if width > self._priv.shape[1]:
            raise EnvError(f"{self.side.key}: worker {old.name} came back with {width} observation columns, "
                           f"allowed: at most {self._priv.shape[1]}")
        for i in blk:
            self._lost[i] = (self._priv[i].clone(), {c: self._img[c][i].clone() for c in self.cameras})
        self._elapsed[blk] = 0
        self._gather(blk)

    def _reset_ids(self, ids: np.ndarray, seeds: list[int]) -> None:
        per: dict[int, list] = {}
        for i, s in zip(ids, seeds):
            k, j = self.where[int(i)]
            per.setdefault(k, []).append([j, int(s)])
        self._exchange({k: {"op": "reset", "envs": e, "render": bool(self.cameras), **self._request("reset")}
                        for k, e in per.items()}, retry=True)
        self._elapsed[torch.as_tensor(np.asarray(ids, np.int64))] = 0
        self._gather(ids)

    def _obs(self) -> Obs:
        out: Obs = {"state": self._state(self._priv).to(self.device, copy=True),
                    "privileged": self._priv.to(self.device, copy=True)}
        for cam in self.cameras:
            out[f"rgb_{cam}"] = self._img[cam].to(self.device, copy=True)
        out["instruction"] = list(self._instr)
        return out

    # ------------------------------------------------------------------ contract
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        ids, seeds = self._reset_seeds(seed, env_ids)
        if len(ids):
            self._reset_ids(ids, seeds)
        return self._obs(), {}

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        check_action(actions, self.spec, chunk=True)
        a = actions.detach().cpu().double().clamp(self.spec.action_low, self.spec.action_high).numpy()  # [B, K, A]
        B, K = a.shape[:2]
        T = self.spec.max_episode_steps
        limits = (T - self._elapsed).numpy()
        replies, revived = self._exchange(
            {k: {"op": "step", "actions": a[blk], "limits": limits[blk], "render": bool(self.cameras),
                 **self._request("step")} for k, blk in enumerate(self.blocks)}, retry=False)
        success = torch.zeros(B, K, dtype=torch.bool)
        reward = torch.zeros(B, K)
        valid = torch.zeros(B, K, dtype=torch.bool)
        ends = torch.zeros(B, dtype=torch.bool)  # the env ended the episode at its last step run
        for k, rep in replies.items():
            blk = self.blocks[k]
            n = torch.from_numpy(np.asarray(rep["n"], np.int64))
            ok = torch.arange(K)[None] < n[:, None]  # [E, K]
            s = torch.from_numpy(np.asarray(rep["success"], bool)) & ok
            valid[blk], success[blk] = ok, s
            reward[blk] = torch.as_tensor(np.asarray(self._rewards(k, rep, s), np.float32)) * ok
            if "terminated" in rep:  # the simulator's own ends (a gymnasium env's); else success ends it
                ends[blk] = torch.from_numpy(np.asarray(rep["terminated"]) > 0)
            else:
                ends[blk] = s.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]
        n_all = valid.sum(dim=1)
        self._elapsed += n_all
        last = (n_all - 1).clamp(min=0)[:, None]
        term = torch.zeros(B, K, dtype=torch.bool)
        trunc = torch.zeros(B, K, dtype=torch.bool)
        term.scatter_(1, last, (ends & (n_all > 0))[:, None])
        trunc.scatter_(1, last, ((self._elapsed >= T)[:, None] & ~term.gather(1, last) & (n_all > 0)[:, None]))
        rows_revived = [i for k in revived for i in self.blocks[k]]
        for i in rows_revived:  # the episode ended with the worker; it was started again and reset
            valid[i, 0] = trunc[i, 0] = True
        self._gather([i for k in replies for i in self.blocks[k]])
        done = (term | trunc).any(dim=1)
        final = None
        if done.any():
            final = self._obs()
            for i in rows_revived:  # its last observation before the worker died
                priv, img = self._lost[i]
                final["privileged"][i] = priv
                final["state"][i] = self._state(priv[None])[0]
                for cam in self.cameras:
                    final[f"rgb_{cam}"][i] = img[cam]
            stepped = np.flatnonzero(done.numpy() & ~np.isin(np.arange(B), rows_revived))
            if len(stepped):
                self._reset_ids(stepped, self._draw(len(stepped)))
        return ChunkStepResult(obs=self._obs(), reward=reward, terminated=term, truncated=trunc,
                               info={"success": success}, valid=valid, final_obs=final)

    def step(self, action: torch.Tensor) -> StepResult:
        return step_as_chunk(self, action)

    def state_dict(self) -> dict[str, Any]:
        """Each worker's env states (its get_state), the step counters and the seed stream: a
        restored env continues bit-identically."""
        states = self._exchange({k: {"op": "get_state"} for k in range(len(self.workers))}, retry=True)[0]
        return {"task": self.spec.task, "num_envs": self.num_envs, "blocks": json.dumps(self.blocks),
                "workers": json.dumps([states[k]["envs"] for k in range(len(self.workers))]),
                "elapsed_steps": self._elapsed.numpy().copy(),
                **self._stream_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_saved_for(state, self.spec)
        if json.loads(state.get("blocks", "null")) not in (None, self.blocks):
            raise EnvError(f"state_dict: saved with workers holding envs {state['blocks']}, this env's hold "
                           f"{self.blocks}; make it with the same num_workers")
        saved = [w if isinstance(w, list) else [w] for w in json.loads(state["workers"])]  # before: a dict per LIBERO worker
        self._exchange({k: {"op": "set_state", "envs": saved[k], "render": bool(self.cameras)}
                        for k in range(len(self.workers))}, retry=True)
        self._gather(range(self.num_envs))
        self._elapsed[:] = torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64))
        self._load_stream(state)

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3]: the latest frames of `camera` (default: the first camera)."""
        cam = render_camera(camera, self.cameras, self.label)
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
