"""GymVecEnv: a gymnasium env behind our VecEnv contract, in this process (docs/gym.md).

The B envs are a gymnasium vector env: B copies of gymnasium.make(env_id) in a SyncVectorEnv
(mapping.vector "single"), or gymnasium.make_vec's own ("sync", "async"). Its auto-reset mode is
translated to ours (an env whose episode ends in `step` is reset inside that call, `final_obs`
holding the finished episode's last observation):
  next_step   the finished rows' observations are their final ones; they are reset at once
              (reset with a mask), which also clears the reset gymnasium would do at the next step
  same_step   the final observations are infos["final_obs"]; the rows are reset again, from our seeds
  disabled    the finished rows' observations are their final ones; reset with a mask
so in every mode a new episode starts from a seed of our stream: seed s gives the same episode
whatever the env index or the mode. In chunk_step a row that finished at substep k is reset
there and stepped on with the chunk's actions (a vector env steps every row), those substeps
discarded (valid False), and reset once more from the same seed at the chunk's end.
Observations (mapping.py): "state" float32 [B, S] and "privileged" float32 [B, P] (the state's
columns first) from the flattened observation, "rgb_<cam>" uint8 [B, H, W, 3], "instruction".
Actions float32 [B, A] in [-1, 1], mapped affinely onto the env's Box. Reward: the env's times
reward_scale; info["success"] per mapping.success; `truncated` at max_episode_steps (the env's
spec by default).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import torch

from sims.env_args import check_common, parse_size, render_camera
from sims.gym.mapping import GymMapping, columns
from sims.mujoco.seeding import parse_env_ids
from sims.seed_stream import SeedStream
from sims.vecenv import (ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action,
                         check_saved_for, step_as_chunk)

os.environ.setdefault("MUJOCO_GL", "egl")  # gymnasium's MuJoCo envs render headless


def _success(m: GymMapping, info: dict, n: int) -> np.ndarray:
    """bool [n] from a vector env's infos (a key's values and its "_key" mask)."""
    if m.success is None or m.success["key"] not in info:
        return np.zeros(n, bool)
    v = np.asarray(info[m.success["key"]], np.float64)
    mask = np.asarray(info.get("_" + m.success["key"], np.ones(n, bool)), bool)
    hit = v >= m.success["min"] if m.success.get("min") is not None else v.astype(bool)
    return hit & mask


def build_vector(m: GymMapping, num_envs: int, render: tuple[int, int] | None, max_steps: int | None) -> Any:
    """The gymnasium vector env of mapping m (module doc)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode

    kw = dict(m.make_kwargs)
    if render is not None:
        kw.update(render_mode="rgb_array", height=render[0], width=render[1])
    if max_steps is not None:
        kw["max_episode_steps"] = max_steps
    mode = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP,
            "disabled": AutoresetMode.DISABLED}[m.autoreset]
    try:
        if m.vector == "single":
            return gym.vector.SyncVectorEnv([lambda: gym.make(m.env_id, **kw)] * num_envs, autoreset_mode=mode)
        return gym.make_vec(m.env_id, num_envs=num_envs, vectorization_mode=m.vector,
                            vector_kwargs={"autoreset_mode": mode}, **kw)
    except gym.error.Error as e:
        raise EnvError(f"task: gym:{m.env_id}: {type(e).__name__}: {str(e).splitlines()[0]}") from None


class GymVecEnv(SeedStream, VecEnv):
    """B copies of a gymnasium env (module doc). mapping: a GymMapping (sims/gym/mapping.py);
    obs_mode "state" | "rgb" (the mapping's cameras); image_size (H, W); seed: the stream of
    unseeded resets; max_episode_steps: default the env's spec. reward_mode, num_threads and
    device are accepted (the env has one reward; tensors are on the CPU)."""

    def __init__(self, task: str, num_envs: int, mapping: GymMapping, *, obs_mode: str = "state",
                 image_size: Sequence[int] | int = (64, 64), cameras: Sequence[str] | None = None,
                 seed: int | None = None, max_episode_steps: int | None = None, reward_mode: str | None = None,
                 num_threads: int | None = None, device: Any = None):
        import gymnasium as gym

        num_envs, cams = check_common(num_envs, obs_mode, cameras or tuple(mapping.cameras), tuple(mapping.cameras),
                                      "this mapping", "a camera in the mapping (mapping.cameras: {name: render})")
        self.m, self.cameras, (h, w) = mapping, cams, parse_size("image_size", image_size)
        self.device = torch.device("cpu")
        if ":" not in mapping.env_id and mapping.env_id not in gym.registry:  # "module:Id" imports its module
            import difflib

            close = difflib.get_close_matches(mapping.env_id, list(gym.registry), n=1)
            hint = f"did you mean gym:{close[0]}? " if close else ""
            raise EnvError(f"task: gym:{mapping.env_id} is not a registered gymnasium env; {hint}allowed: an id of "
                           f"gymnasium.registry, or 'package.module:EnvId' to import the module that registers it")
        spec = gym.spec(mapping.env_id)
        steps = int(max_episode_steps or (spec.max_episode_steps if spec else 0) or 0)
        if steps < 1:
            raise EnvError(f"max_episode_steps: {mapping.env_id} has no time limit; allowed: a positive int")
        rendered = any(mapping.cameras[c] == "render" for c in cams)
        self.vec = build_vector(mapping, int(num_envs), (h, w) if rendered else None, steps)
        try:
            self._setup(task, int(num_envs), steps, (h, w), seed)
        except BaseException:
            self.vec.close()
            raise

    def _setup(self, task: str, B: int, steps: int, size: tuple[int, int], seed: int | None) -> None:
        import gymnasium as gym

        space, act = self.vec.single_observation_space, self.vec.single_action_space
        if not isinstance(act, gym.spaces.Box) or not np.all(np.isfinite(act.low)) or not np.all(np.isfinite(act.high)):
            raise EnvError(f"task: {task}: the action space {act} is not a bounded Box; allowed: a bounded Box")
        self._low, self._high = act.low.astype(np.float64).ravel(), act.high.astype(np.float64).ravel()
        self._image_keys = {c: k for c, k in self.m.cameras.items() if k != "render"}
        spans = None
        if isinstance(space, gym.spaces.Dict):
            spans, start = {}, 0
            for key, sub in space.spaces.items():
                if key in self._image_keys.values():
                    continue
                n = int(gym.spaces.flatdim(sub))
                spans[key], start = (start, start + n), start + n
            width = start
        else:
            width = int(gym.spaces.flatdim(space))
        self._spans = spans
        self._state_cols, self._priv_cols = columns(self.m, width, spans)
        dt = self._attr("dt")
        hz = 1.0 / dt if dt else float(self.vec.metadata.get("render_fps") or 0.0)
        self.spec = EnvSpec(task=task, num_envs=B, action_dim=int(np.prod(act.shape)), state_dim=len(self._state_cols),
                            privileged_dim=len(self._priv_cols), max_episode_steps=steps, control_hz=hz,
                            cameras=self.cameras, image_size=size)
        self._instr = [self.m.instruction or self.m.env_id] * B
        self._elapsed = torch.zeros(B, dtype=torch.long)
        self._start_stream(seed)
        self._seeds = np.zeros(B, np.int64)  # the seed each row's episode started from
        self._obs_np = self._reset_rows(np.ones(B, bool), self._draw(B))

    def _attr(self, name: str) -> Any:
        try:
            return self.vec.get_attr(name)[0]
        except Exception:  # noqa: BLE001 - an env without it
            return None

    # ------------------------------------------------------------------ helpers
    def _flat(self, obs: Any) -> dict[str, np.ndarray]:
        """The vector env's observation -> {"flat": float64 [B, D], image key: uint8 [B, H, W, 3]}."""
        if self._spans is None:
            return {"flat": np.asarray(obs, np.float64).reshape(self.num_envs, -1)}
        out = {"flat": np.concatenate([np.asarray(obs[k], np.float64).reshape(self.num_envs, -1)
                                       for k in self._spans], axis=1)}
        out.update({k: np.asarray(obs[k]) for k in self._image_keys.values()})
        return out

    def _frames(self, obs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        for cam in self.cameras:
            src = self.m.cameras[cam]
            obs[f"rgb_{cam}"] = (np.stack(self.vec.call("render")) if src == "render" else obs[src]).astype(np.uint8)
        return obs

    def _reset_rows(self, mask: np.ndarray, seeds: list[int], base: dict | None = None) -> dict[str, np.ndarray]:
        """Reset the rows of bool mask [B] from seeds (one per True row); the observation of
        every row: the reset rows' new ones, the others' from base (default: the current)."""
        full = np.zeros(self.num_envs, np.int64)
        full[mask] = seeds
        self._seeds[mask] = full[mask]
        opts = None if mask.all() else {"reset_mask": mask}
        obs, _ = self.vec.reset(seed=[int(s) for s in full], options=opts)
        self._elapsed[torch.from_numpy(mask)] = 0
        new = self._frames(self._flat(obs))
        if mask.all() or not hasattr(self, "_obs_np"):
            return new
        old = {k: v.copy() for k, v in (base if base is not None else self._obs_np).items()}
        for k in old:
            old[k][mask] = new[k][mask]
        return old

    def _to_obs(self, o: dict[str, np.ndarray]) -> Obs:
        flat = torch.from_numpy(o["flat"]).float()
        out: Obs = {"state": flat[:, self._state_cols].contiguous(), "privileged": flat[:, self._priv_cols].contiguous()}
        for cam in self.cameras:
            out[f"rgb_{cam}"] = torch.from_numpy(np.ascontiguousarray(o[f"rgb_{cam}"]))
        out["instruction"] = list(self._instr)
        return out

    # ------------------------------------------------------------------ contract
    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        ids, seeds = self._reset_seeds(seed, env_ids)
        if len(ids):
            mask = np.zeros(self.num_envs, bool)
            mask[ids] = True
            order = np.argsort(ids)  # the mask takes the seeds in row order
            self._obs_np = self._reset_rows(mask, [seeds[k] for k in order])
        return self._to_obs(self._obs_np), {}

    def _env_step(self, a: np.ndarray) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict | None]:
        """One vector step of actions [B, A] in [-1, 1]: (obs, reward, terminated, truncated,
        success, the final observations of finished rows where the mode gives them elsewhere)."""
        env_a = self._low + (a + 1.0) * 0.5 * (self._high - self._low)
        obs, r, term, trunc, info = self.vec.step(env_a.astype(self.vec.single_action_space.dtype))
        o = self._frames(self._flat(obs))
        final = None
        if self.m.autoreset == "same_step" and "final_obs" in info:  # the rows already started anew
            final = {k: v.copy() for k, v in o.items()}
            for i in np.flatnonzero(np.asarray(info["_final_obs"], bool)):
                row = self._flat_row(info["final_obs"][i], i)
                for k in final:
                    final[k][i] = row[k]
        return (o, np.asarray(r, np.float64) * self.m.reward_scale, np.asarray(term, bool), np.asarray(trunc, bool),
                _success(self.m, info, self.num_envs), final)

    def _flat_row(self, obs: Any, i: int) -> dict[str, np.ndarray]:
        """Row i's observation (a same-step final one) -> its row of each _flat key; a rendered
        camera's frame is the row's frame before the step (gymnasium keeps no final frame)."""
        if self._spans is None:
            row = {"flat": np.asarray(obs, np.float64).ravel()}
        else:
            row = {"flat": np.concatenate([np.asarray(obs[k], np.float64).ravel() for k in self._spans])}
            row.update({k: np.asarray(obs[k]) for k in self._image_keys.values()})
        for cam in self.cameras:
            src = self.m.cameras[cam]
            row[f"rgb_{cam}"] = self._obs_np[f"rgb_{cam}"][i] if src == "render" else row[src]
        return row

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        check_action(actions, self.spec, chunk=True)
        a = actions.detach().cpu().double().clamp(-1.0, 1.0).numpy()  # [B, K, A]
        B, K = a.shape[:2]
        T = self.spec.max_episode_steps
        reward = np.zeros((B, K), np.float32)
        term, trunc, success, valid = (np.zeros((B, K), bool) for _ in range(4))
        ended = np.zeros(B, bool)
        final, new_seed = None, {}
        for k in range(K):
            o, r, te, tr, su, fin = self._env_step(a[:, k])
            live = ~ended
            valid[live, k] = True
            reward[live, k], success[live, k], term[live, k] = r[live], su[live], te[live]
            self._elapsed[torch.from_numpy(live)] += 1
            over = live & ~te & (tr | (self._elapsed.numpy() >= T))
            trunc[over, k] = True
            now = live & (te | over)
            if now.any():
                if final is None:
                    final = {key: v.copy() for key, v in o.items()}
                src = fin if fin is not None else o
                for key in final:
                    final[key][now] = src[key][now]
                ended |= now
                seeds = self._draw(int(now.sum()))
                new_seed.update(zip(np.flatnonzero(now).tolist(), seeds))
                if k < K - 1:  # stepped on with the chunk (discarded), reset again below
                    o = self._reset_rows(now, seeds, base=o)
            self._obs_np = o
        if ended.any():  # the new episodes start from the seeds drawn where they ended
            self._obs_np = self._reset_rows(ended, [new_seed[i] for i in np.flatnonzero(ended).tolist()])
        if final is not None:  # the rows that did not finish: their current observation
            for key in final:
                final[key][~ended] = self._obs_np[key][~ended]
        fo = self._to_obs(final) if final is not None else None
        obs = self._to_obs(self._obs_np)
        return ChunkStepResult(obs=obs, reward=torch.from_numpy(reward), terminated=torch.from_numpy(term),
                               truncated=torch.from_numpy(trunc), info={"success": torch.from_numpy(success)},
                               valid=torch.from_numpy(valid), final_obs=fo)

    def step(self, action: torch.Tensor) -> StepResult:
        return step_as_chunk(self, action)

    def _sub_envs(self) -> list:
        envs = getattr(self.vec, "envs", None)
        if envs is None or not all(hasattr(e.unwrapped, "data") and hasattr(e.unwrapped, "model") for e in envs):
            raise EnvError(f"state_dict: checkpoints hold MuJoCo-based gymnasium envs in a SyncVectorEnv; "
                           f"{self.m.env_id} ({type(self.vec).__name__}) is not one; allowed: mapping.vector single or sync")
        return envs

    def state_dict(self) -> dict[str, Any]:
        """Each env's MuJoCo integration state, its np_random and time-limit counter, the
        current observation, the step counters and the seed stream: a restored env continues
        bit-identically."""
        import json

        import mujoco

        envs, sig = self._sub_envs(), mujoco.mjtState.mjSTATE_INTEGRATION
        saved = []
        for e in envs:
            u = e.unwrapped
            mjs = np.empty(mujoco.mj_stateSize(u.model, sig))
            mujoco.mj_getState(u.model, u.data, mjs, sig)
            saved.append({"mj": mjs.tolist(), "rng": u.np_random.bit_generator.state,
                          "elapsed": int(e.get_wrapper_attr("_elapsed_steps"))})
        return {"task": self.spec.task, "num_envs": self.num_envs, "envs": json.dumps(saved),
                **{f"obs_{k}": v.copy() for k, v in self._obs_np.items()}, "seeds": self._seeds.copy(),
                "elapsed_steps": self._elapsed.numpy().copy(),
                **self._stream_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import json

        import mujoco

        check_saved_for(state, self.spec)
        sig = mujoco.mjtState.mjSTATE_INTEGRATION
        for e, st in zip(self._sub_envs(), json.loads(state["envs"])):
            u, mjs = e.unwrapped, np.asarray(st["mj"], np.float64)
            mujoco.mj_setState(u.model, u.data, mjs, sig)
            mujoco.mj_forward(u.model, u.data)  # positions for rendering; it rewrites the warm start,
            mujoco.mj_setState(u.model, u.data, mjs, sig)  # so the state is set once more
            u.np_random.bit_generator.state = st["rng"]
            e.set_wrapper_attr("_elapsed_steps", st["elapsed"])
        self._obs_np = {k[4:]: np.array(v) for k, v in state.items() if k.startswith("obs_")}
        self._seeds = np.asarray(state["seeds"], np.int64).copy()
        self._elapsed[:] = torch.as_tensor(np.asarray(state["elapsed_steps"], np.int64))
        self._load_stream(state)

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3]: the latest frames of `camera` (default: the first camera)."""
        cam = render_camera(camera, self.cameras, "gym")
        return torch.from_numpy(self._obs_np[f"rgb_{cam}"][parse_env_ids(env_ids, self.num_envs)].copy())

    def close(self) -> None:
        if getattr(self, "vec", None) is not None:
            self.vec.close()
            self.vec = None
