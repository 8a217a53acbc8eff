"""The worker side of a side-venv simulator: E envs in one process, run by the side venv's
interpreter. Standard library and numpy only (and sims/frames.py): a family's worker script
(sims/libero/worker.py, sims/metaworld/worker.py) subclasses SideWorker with what differs, and
its main calls serve().

Shared memory (created here, unlinked at close; the parent maps it from the hello frame):
  obs     float64 [E, P]            each env's observation row (the family says what P holds)
  images  uint8   [E, C, H, W, 3]   the cameras in order, upright; written when a request renders
Requests (env indices j are this worker's own, 0..E-1; arrays travel raw, sims/frames.py):
  {"op": "reset", "envs": [[j, seed], ...], "render": bool, ...}          -> {"ok": true}
  {"op": "step", "actions": float64 [E, K, A], "limits": int64 [E], "render": bool, ...}
      -> {"ok": true, "n": int64 [E] steps run, "success": bool [E, K], "reward": float64 [E, K],
          and float64 [E] per extra the family returns}: env j stops where the family's step_env stops
          it (after a success, or where the simulator ends the episode: extra "terminated" 1) or
          after limits[j] steps
  {"op": "get_state"} -> {"ok": true, "envs": [state of env j (JSON), ...]}
  {"op": "set_state", "envs": [...], "render": bool}
  {"op": "quit"}
Every reply has "ok"; a failed request gets {"ok": false, "reason": "..."} and the worker goes on.
The libraries' prints go to stderr: the real stdout is kept for frames.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from multiprocessing import shared_memory
from typing import Any, Callable

import numpy as np

from sims.frames import leave_stop_to_parent, read_frame, write_frame


class SideWorker:
    """E envs and their shared memory. A subclass holds the envs and implements reset_env,
    step_env, render_env, get_env_state and set_env_state (and close_envs); `info` goes into
    the hello frame."""

    info: dict = {}

    def make_memory(self, n_envs: int, obs_dim: int, n_cams: int, height: int, width: int) -> None:
        """Create the shared memory: self.obs float64 [E, P], self.images uint8 [E, C, H, W, 3]."""
        img_off = n_envs * obs_dim * 8
        size = img_off + n_envs * n_cams * height * width * 3
        self.shm = shared_memory.SharedMemory(create=True, size=max(size, 1))
        self.obs = np.ndarray((n_envs, obs_dim), np.float64, buffer=self.shm.buf, offset=0)
        self.images = np.ndarray((n_envs, n_cams, height, width, 3), np.uint8, buffer=self.shm.buf, offset=img_off)
        self.layout = {"obs": ["<f8", [n_envs, obs_dim], 0], "images": ["|u1", list(self.images.shape), img_off]}

    def hello(self) -> dict:
        return {"ok": True, "shm": self.shm.name, "arrays": self.layout, **self.info}

    # ------------------------------------------------------------------ a family's part
    def reset_env(self, j: int, seed: int, req: dict) -> None:
        raise NotImplementedError

    def step_env(self, j: int, actions: np.ndarray, req: dict) -> tuple[list[bool], list[float], dict]:
        """Run actions [n, A] on env j, stopping after a success: (success per step, reward per
        step, {extra: float})."""
        raise NotImplementedError

    def render_env(self, j: int) -> None:
        raise NotImplementedError

    def get_env_state(self, j: int) -> Any:
        raise NotImplementedError

    def set_env_state(self, j: int, state: Any) -> None:
        raise NotImplementedError

    def close_envs(self) -> None:
        pass

    # ------------------------------------------------------------------ the ops
    def reset(self, req: dict) -> dict:
        for j, seed in req["envs"]:
            self.reset_env(int(j), int(seed), req)
            if req.get("render"):
                self.render_env(int(j))
        return {"ok": True}

    def step(self, req: dict) -> dict:
        acts = np.asarray(req["actions"], np.float64)  # [E, K, A]
        E, K = acts.shape[:2]
        limits = np.asarray(req.get("limits", np.full(E, K)), np.int64)
        n = np.zeros(E, np.int64)
        success, reward = np.zeros((E, K), bool), np.zeros((E, K), np.float64)
        extras: dict[str, np.ndarray] = {}
        for j in range(E):
            s, r, extra = self.step_env(j, acts[j, :max(int(limits[j]), 0)], req)
            n[j] = len(s)
            success[j, :n[j]], reward[j, :n[j]] = s, r
            for key, v in extra.items():
                extras.setdefault(key, np.zeros(E, np.float64))[j] = v
            if req.get("render"):
                self.render_env(j)
        return {"ok": True, "n": n, "success": success, "reward": reward, **extras}

    def get_state(self, req: dict) -> dict:
        return {"ok": True, "envs": [self.get_env_state(j) for j in range(len(self.obs))]}

    def set_state(self, req: dict) -> dict:
        for j, st in enumerate(req["envs"]):
            self.set_env_state(j, st)
            if req.get("render"):
                self.render_env(j)
        return {"ok": True}

    def ops(self) -> dict[str, Callable[[dict], dict]]:
        return {"reset": self.reset, "step": self.step, "get_state": self.get_state, "set_state": self.set_state}

    def close(self) -> None:
        try:
            self.close_envs()
        finally:
            if getattr(self, "shm", None) is not None:
                self.shm.close()
                self.shm.unlink()


def serve(parser: argparse.ArgumentParser, build: Callable[[argparse.Namespace], Any]) -> None:
    """A worker's main: parse the arguments, build the worker (anything with hello, ops and
    close), write its hello frame, then answer each request frame until quit or end of input."""
    leave_stop_to_parent()
    args = parser.parse_args()
    out = os.fdopen(os.dup(1), "wb")  # frames only
    os.dup2(2, 1)  # anything the libraries print goes to stderr
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    try:
        worker = build(args)
        ops = worker.ops()
    except Exception as e:  # noqa: BLE001 - reported to the parent in one line
        traceback.print_exc()
        write_frame(out, {"ok": False, "reason": f"{type(e).__name__}: {e}"})
        return
    try:
        write_frame(out, worker.hello())
        while (req := read_frame(inp)) is not None and req.get("op") != "quit":
            op = ops.get(req.get("op"))
            if op is None:
                write_frame(out, {"ok": False, "reason": f"unknown op {req.get('op')!r}; allowed: {', '.join(ops)}"})
                continue
            try:
                write_frame(out, op(req))
            except Exception as e:  # noqa: BLE001
                traceback.print_exc()
                write_frame(out, {"ok": False, "reason": f"{req.get('op')}: {type(e).__name__}: {e}"})
    finally:
        worker.close()
