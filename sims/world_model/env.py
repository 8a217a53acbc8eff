"""WorldModelVecEnv: the simulators' VecEnv contract on a learned model.

Observations have the modelled task's keys and shapes: "state" (the first state_dim entries
of the decoded privileged vector), "privileged", "instruction" (the reset frame's episode's),
and with obs_mode "rgb" (a model trained with cameras) "rgb_<cam>" uint8 [B, H, W, 3] at the
dataset's frame size: the real frame after a reset, then the frames decoded from the latent,
composited over that reset frame (sims/world_model/vision.py).
A reset draws a real frame of the training data: an episode's first frame, or with
keyframe_every > 0 also a mid-trajectory keyframe (the episode clock then starts at that
frame's index). Equal seeds give equal reset frames. A seeded reset also reseeds the stream
that later auto-resets draw from. rollout (sims/world_model/rollout.py) says how the ensemble
steps: "mean" (default) advances every member from the env's latent and serves their mean;
"members" lets every member keep its own latent and row i serve member i mod M, with the
disagreement the spread of the members' own latents (the checkpoint's
member_disagreement_threshold then truncates).
- terminated: the success head's probability > success_threshold (default 0.5;
  info["success_p"] holds the probability), or the done head's > 0.5;
- truncated: the task's horizon, or the ensemble disagreement above the checkpoint's
  threshold (info["uncertain"] says which rows; info["disagreement"] holds its value);
- reward: the reward head minus uncertainty_lambda * disagreement (reward_mode "dense"), or
  with reward_mode "sparse" 1 when the success head fires, minus the same penalty. The reward
  head has a small positive bias off the data, which a policy can farm for a whole episode
  (docs/world_model.md, "Transfer"). With reward_mode "task" the decoded state is scored by
  the task's own progress and success (sims/world_model/task_terms.py): reward P(x') - P(x) +
  1[success], terminated on the decoded state's success or failure, no heads involved.
With member heads (WorldModelConfig.member_heads), success_aggregate says how the members'
success probabilities combine ("mean", or "min": every member must call it a success), and the
dense and sparse rewards also subtract uncertainty_lambda times the members' std of the
success probability.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import numpy as np
import torch

from sims.vecenv import ChunkStepResult, EnvError, EnvSpec, Obs, Seed, StepResult, VecEnv, check_action
from sims.world_model.checkpoint import load_world_model
from sims.world_model.rollout import AGGREGATES, ROLLOUTS, decode_frames, encode_raw, mean_step, member_step
from sims.world_model.vision import split_cameras, stack_cameras


class WorldModelVecEnv(VecEnv):
    """path: a checkpoint of `embodied world-model train`. expected_task: if given, the task
    the checkpoint must model. max_episode_steps: override the task's horizon. seed: seeds the
    reset stream until the first seeded reset. obs_mode "rgb" serves `cameras` (default: all the
    model's; each must be one of them) at the model's image_size (a given one must match).
    success_threshold: the success head's probability above which a step is a success.
    uncertainty_scale: multiplies the checkpoint's disagreement threshold (< 1: truncate sooner).
    success_aggregate: with member heads, "mean" or "min" of their success probabilities.
    rollout: "mean" or "members" (the module's docstring). model_noise: > 0 adds Gaussian noise
    of that many times the checkpoint's residual_std (one step's error on held-out data, per
    latent dimension; with a noise head, scaled per state and action: embodied/world_model/noise.py)
    to every step's next latent, drawn from the env's seeded stream, so that a
    policy that only succeeds when the dynamics go exactly its way succeeds less (PETS's
    aleatoric sampling; docs/world_model.md). allow_failed_model: use a model whose quality gate
    (report.json of `embodied world-model train`, embodied/world_model/quality.py) failed."""

    def __init__(self, path: str, num_envs: int, *, obs_mode: str = "state", expected_task: str | None = None,
                 max_episode_steps: int | None = None, seed: int | None = None, keyframes: bool = True,
                 reward_mode: str = "dense", cameras: Sequence[str] | None = None,
                 image_size: int | Sequence[int] | None = None, success_threshold: float = 0.5,
                 uncertainty_scale: float = 1.0, success_aggregate: str = "mean", rollout: str = "mean",
                 model_noise: float = 0.0, allow_failed_model: bool = False):
        if reward_mode not in ("dense", "sparse", "task"):
            raise EnvError(f"reward_mode: {reward_mode!r} is not built for world models; allowed: dense "
                           "(the reward head), sparse (the success head), task (the task's terms on the "
                           "decoded state)")
        self.reward_mode = reward_mode
        if not 0.0 < float(success_threshold) < 1.0:
            raise EnvError(f"success_threshold: expected a probability in (0, 1), got {success_threshold!r}")
        self.success_threshold = float(success_threshold)
        if not float(uncertainty_scale) > 0.0:
            raise EnvError(f"uncertainty_scale: expected a positive number, got {uncertainty_scale!r}")
        if obs_mode not in ("state", "rgb"):
            raise EnvError(f"obs_mode: {obs_mode!r} is not built for world models; allowed: state, rgb")
        if not isinstance(num_envs, int) or num_envs < 1:
            raise EnvError(f"num_envs: expected a positive integer, got {num_envs!r}")
        self.model, self.resets = load_world_model(path, expected_task)
        cfg = self.model.cfg
        if success_aggregate not in AGGREGATES or (success_aggregate != "mean" and not cfg.member_heads):
            raise EnvError(f"success_aggregate: {success_aggregate!r} is not built for {path}; allowed: "
                           f"{', '.join(AGGREGATES) if cfg.member_heads else 'mean (one set of heads)'}")
        self.success_aggregate = success_aggregate
        if rollout not in ROLLOUTS:
            raise EnvError(f"rollout: {rollout!r} is not built; allowed: {', '.join(ROLLOUTS)}")
        if rollout == "members" and not cfg.member_disagreement_threshold > 0:
            raise EnvError(f"rollout: 'members' needs a checkpoint with member_disagreement_threshold; {path} "
                           "was trained before it existed (train it again); allowed here: mean")
        if rollout == "members" and success_aggregate != "mean":
            raise EnvError("success_aggregate: with rollout 'members' a row's own member's heads score it; "
                           "allowed: mean")
        self.rollout = rollout
        if not (isinstance(model_noise, (int, float)) and not isinstance(model_noise, bool) and model_noise >= 0):
            raise EnvError(f"model_noise: expected a number >= 0 (a multiple of the checkpoint's one-step "
                           f"error std), got {model_noise!r}")
        if model_noise > 0 and len(cfg.residual_std) != cfg.latent:
            raise EnvError(f"model_noise: needs a checkpoint with residual_std; {path} was trained before it "
                           "existed (train it again); allowed here: 0")
        self._noise_scale = float(model_noise)
        gate = _gate(path)
        if gate is not None and not gate.get("passed", True) and not allow_failed_model:
            raise EnvError(f"world model: {path} failed its quality gate ({gate.get('why')}; its report.json); "
                           "allowed: a model that passes (more data, longer training), or "
                           "env.allow_failed_model=true to use it anyway")
        self.cfg = cfg
        base = cfg.member_disagreement_threshold if rollout == "members" else cfg.disagreement_threshold
        self.uncertainty_threshold = base * float(uncertainty_scale)
        self.obs_mode = obs_mode
        self.cameras = self._served_cameras(path, cameras, image_size) if obs_mode == "rgb" else ()
        if reward_mode == "task":
            from sims.world_model.task_terms import TERMS

            if cfg.task not in TERMS:
                raise EnvError(f"reward_mode: task terms exist for {', '.join(sorted(TERMS))}, not {cfg.task}; "
                               "allowed here: dense, sparse")
            self._terms = TERMS[cfg.task]
        if not keyframes:
            first = self.resets["t"] == 0
            self.resets = {**{k: v[first] for k, v in self.resets.items() if k != "instruction"},
                           "instruction": [s for s, f in zip(self.resets["instruction"], first.tolist()) if f]}
        size = tuple(int(v) for v in cfg.image_size) if cfg.cameras else (64, 64)
        self.spec = EnvSpec(task=f"wm:{path}", num_envs=num_envs, action_dim=cfg.action_dim,
                            state_dim=cfg.state_dim, privileged_dim=cfg.privileged_dim,
                            max_episode_steps=int(max_episode_steps or cfg.max_episode_steps),
                            control_hz=cfg.control_hz, cameras=self.cameras, image_size=size, sim_task=cfg.task)
        B = num_envs
        self._rng = np.random.default_rng(seed)
        self._z = torch.zeros(B, cfg.latent)
        self._zm = torch.zeros(cfg.members, B, cfg.latent)  # rollout "members": every member's own latent
        self._follow = torch.arange(B) % cfg.members  # rollout "members": the member row i serves
        self._x = torch.zeros(B, cfg.privileged_dim)
        self._elapsed = np.zeros(B, dtype=np.int64)
        self._instr = [""] * B
        # with cameras: the frames served (uint8 [B, 3C, H, W]) and the reset frames they are composited over
        self._img = (torch.zeros(B, 3 * len(cfg.cameras), *size, dtype=torch.uint8) if cfg.cameras else None)
        self._ctx = None if self._img is None else self._img.clone()
        self.reset(seed=seed)

    def _served_cameras(self, path: str, cameras: Sequence[str] | None,
                        image_size: int | Sequence[int] | None) -> tuple[str, ...]:
        cfg = self.model.cfg
        if not cfg.cameras:
            raise EnvError(f"obs_mode: 'rgb' needs a world model trained with cameras; {path} models state only "
                           "(train one with cameras=[front, ...] on an rgb dataset); allowed here: state")
        cams = tuple(cfg.cameras) if cameras is None else tuple(cameras)
        bad = [c for c in cams if c not in cfg.cameras]
        if bad or not cams:
            raise EnvError(f"cameras: {path} models cameras {', '.join(cfg.cameras)}, not {bad[0] if bad else '()'}")
        if image_size is not None:
            want = (int(image_size), int(image_size)) if isinstance(image_size, (int, np.integer)) else \
                tuple(int(v) for v in image_size)
            if list(want) != [int(v) for v in cfg.image_size]:
                raise EnvError(f"image_size: {path} decodes {cfg.image_size[0]}x{cfg.image_size[1]} frames, not "
                               f"{want[0]}x{want[1]}; allowed: {cfg.image_size[0]}")
        return cams

    # -- observations -------------------------------------------------------------------------
    def _obs(self, x: torch.Tensor, instr: list[str]) -> Obs:
        x = x.float().clone()
        obs = {"state": x[:, : self.spec.state_dim].clone(), "privileged": x}
        if self.cameras:
            frames = split_cameras(self._img, self.cfg.cameras)
            obs.update({f"rgb_{c}": frames[c] for c in self.cameras})
        obs["instruction"] = list(instr)
        return obs

    def _reset_rows(self, ids: np.ndarray, picks: np.ndarray) -> None:
        x = self.resets["x"][torch.from_numpy(picks)]
        img = self.resets["img"][torch.from_numpy(picks)] if self._img is not None else None
        self._x[ids] = x
        if img is not None:
            self._img[ids], self._ctx[ids] = img, img
        self._set_latent(ids, encode_raw(self.model, x, img))
        self._elapsed[ids] = self.resets["t"][torch.from_numpy(picks)].numpy()
        for i, p in zip(ids.tolist(), picks.tolist()):
            self._instr[i] = self.resets["instruction"][p]

    def _set_latent(self, ids: np.ndarray, z: torch.Tensor) -> None:
        self._z[ids] = z
        self._zm[:, ids] = z  # every member starts from the encoded frame

    def _pick(self, n: int, seed: Seed) -> np.ndarray:
        N = len(self.resets["x"])
        if seed is None:
            return self._rng.integers(N, size=n)
        seeds = [seed + k for k in range(n)] if isinstance(seed, (int, np.integer)) else list(seed)
        if len(seeds) != n:
            raise EnvError(f"seed: expected an int or {n} seeds (one per reset env), got {len(seeds)}")
        self._rng = np.random.default_rng([int(s) % 2**32 for s in seeds] + [N])  # later auto-resets follow
        return np.array([np.random.default_rng(int(s) % 2**32).integers(N) for s in seeds], dtype=np.int64)

    def reset(self, seed: Seed = None, env_ids: torch.Tensor | None = None) -> tuple[Obs, dict]:
        B = self.num_envs
        if env_ids is None:
            ids = np.arange(B)
        else:
            ids = np.asarray(torch.as_tensor(env_ids).reshape(-1).tolist(), dtype=np.int64)
            if len(ids) and (ids.min() < 0 or ids.max() >= B):
                raise EnvError(f"env_ids: expected indices in 0..{B - 1}, got {ids.tolist()}")
        self._reset_rows(ids, self._pick(len(ids), seed))
        return self._obs(self._x, self._instr), {}

    def reset_to(self, privileged: torch.Tensor, instructions: Sequence[str] | None = None,
                 env_ids: torch.Tensor | None = None, images: dict[str, torch.Tensor] | None = None
                 ) -> tuple[Obs, dict]:
        """Start rows env_ids (default all) from given raw privileged vectors [n, P], e.g. the
        simulator's initial states, so that a policy meets the same starts in the model and in the
        simulator. The episode clock starts at 0; instructions default to the first reset frame's.
        A model with cameras also needs their frames: images {"rgb_<cam>": uint8 [n, H, W, 3]}
        (e.g. the simulator's rgb observation)."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(torch.as_tensor(env_ids).reshape(-1))
        x = torch.as_tensor(privileged).float().reshape(len(ids), -1)
        if x.shape[1] != self.spec.privileged_dim:
            raise EnvError(f"privileged: expected [{len(ids)}, {self.spec.privileged_dim}], got {list(x.shape)}")
        img = None
        if self._img is not None:
            keys = [f"rgb_{c}" for c in self.cfg.cameras]
            missing = [k for k in keys if images is None or k not in images]
            if missing:
                raise EnvError(f"images: this world model encodes frames too; reset_to needs {', '.join(keys)} "
                               f"(uint8 [n, H, W, 3]), {missing[0]} is missing")
            img = stack_cameras({c: torch.as_tensor(images[f"rgb_{c}"]) for c in self.cfg.cameras}, self.cfg.cameras)
            if tuple(img.shape) != (len(ids), *self._img.shape[1:]):
                raise EnvError(f"images: expected {len(ids)} frames of {self.spec.image_size[0]}x"
                               f"{self.spec.image_size[1]} per camera, got {list(images[keys[0]].shape)}")
            self._img[ids], self._ctx[ids] = img, img
        self._x[ids] = x
        self._set_latent(ids, encode_raw(self.model, x, img))
        self._elapsed[ids] = 0
        for k, i in enumerate(ids.tolist()):
            self._instr[i] = instructions[k] if instructions is not None else self.resets["instruction"][0]
        return self._obs(self._x, self._instr), {}

    # -- stepping ------------------------------------------------------------------------------
    def _advance(self, a: torch.Tensor, rows: np.ndarray) -> dict[str, torch.Tensor]:
        noise = None
        if self._noise_scale > 0:  # drawn from the env's own stream: equal seeds, equal noise
            noise = torch.from_numpy(self._rng.standard_normal((len(rows), self.cfg.latent), dtype=np.float32))
            noise = noise * self._noise_scale  # the rollout scales it by the model's noise_std
        if self.rollout == "members":
            out = member_step(self.model, self._zm[:, rows], a, self._follow[rows], noise)
            self._zm[:, rows] = out["zm"]
        else:
            out = mean_step(self.model, self._z[rows], a, self.success_aggregate, noise)
        x_prev = self._x[rows].clone()
        self._z[rows], self._x[rows] = out["z"], out["x"]
        if self.cameras:
            self._img[rows] = decode_frames(self.model, out["z"], self._ctx[rows])
        self._elapsed[rows] += 1
        if self.reward_mode == "task":
            p0 = self._terms(x_prev.numpy())[0]
            p1, succ, fail = self._terms(out["x"].numpy())
            success, terminated = torch.from_numpy(succ), torch.from_numpy(succ | fail)
            base = torch.from_numpy((p1 - p0 + succ).astype(np.float32))
        else:
            success = out["success_p"] > self.success_threshold
            terminated = success | (out["done_p"] > 0.5)
            base = out["reward"] if self.reward_mode == "dense" else success.float()
        uncertain = out["disagreement"] > self.uncertainty_threshold
        horizon = torch.from_numpy(self._elapsed[rows] >= self.spec.max_episode_steps)
        truncated = (horizon | uncertain) & ~terminated
        penalty = out["disagreement"] + (out["head_disagreement"] if self.reward_mode != "task" else 0.0)
        reward = base - self.cfg.uncertainty_lambda * penalty
        return {"reward": reward.float(), "terminated": terminated, "truncated": truncated,
                "success": success, "uncertain": uncertain & truncated,
                "disagreement": out["disagreement"].float(),
                "success_p": success.float() if self.reward_mode == "task" else out["success_p"].float()}

    def step(self, action: torch.Tensor) -> StepResult:
        check_action(action, self.spec)
        a = action.detach().float().clamp(self.spec.action_low, self.spec.action_high)
        res = self._advance(a, np.arange(self.num_envs))
        done = res["terminated"] | res["truncated"]
        final = None
        if done.any():
            final = self._obs(self._x, self._instr)
            ids = done.nonzero().flatten().numpy()
            self._reset_rows(ids, self._pick(len(ids), None))
        info = {k: res[k] for k in ("success", "uncertain", "disagreement", "success_p")}
        return StepResult(self._obs(self._x, self._instr), res["reward"], res["terminated"], res["truncated"],
                          info, final)

    def chunk_step(self, actions: torch.Tensor) -> ChunkStepResult:
        check_action(actions, self.spec, chunk=True)
        B, K = actions.shape[:2]
        a = actions.detach().float().clamp(self.spec.action_low, self.spec.action_high)
        reward, dis, succ_p = torch.zeros(B, K), torch.zeros(B, K), torch.zeros(B, K)
        flags = {n: torch.zeros(B, K, dtype=torch.bool) for n in ("terminated", "truncated", "success",
                                                                   "uncertain", "valid")}
        live = np.ones(B, dtype=bool)
        for k in range(K):
            rows = np.nonzero(live)[0]
            if len(rows) == 0:
                break
            res = self._advance(a[rows, k], rows)
            reward[rows, k], dis[rows, k], succ_p[rows, k] = res["reward"], res["disagreement"], res["success_p"]
            for n in ("terminated", "truncated", "success", "uncertain"):
                flags[n][rows, k] = res[n]
            flags["valid"][rows, k] = True
            live[rows[(res["terminated"] | res["truncated"]).numpy()]] = False
        done = ~live
        final = None
        if done.any():
            final = self._obs(self._x, self._instr)
            ids = np.nonzero(done)[0]
            self._reset_rows(ids, self._pick(len(ids), None))
        info = {"success": flags["success"], "uncertain": flags["uncertain"], "disagreement": dis,
                "success_p": succ_p}
        return ChunkStepResult(self._obs(self._x, self._instr), reward, flags["terminated"], flags["truncated"],
                               info, flags["valid"], final)

    # -- checkpointing -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        state = {"latent": self._z.numpy().copy(), "member_latents": self._zm.numpy().copy(),
                 "privileged": self._x.numpy().copy(),
                 "elapsed": self._elapsed.copy(), "instructions": list(self._instr),
                 "rng": json.dumps(self._rng.bit_generator.state)}
        if self._img is not None:
            state["images"], state["context"] = self._img.numpy().copy(), self._ctx.numpy().copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._z = torch.as_tensor(np.asarray(state["latent"])).float().clone()
        zm = state.get("member_latents")  # absent in a state written before the "members" rollout
        zm = self._z.expand(self.cfg.members, -1, -1) if zm is None else torch.as_tensor(np.asarray(zm))
        self._zm = zm.float().clone()
        self._x = torch.as_tensor(np.asarray(state["privileged"])).float().clone()
        self._elapsed = np.asarray(state["elapsed"], dtype=np.int64).copy()
        self._instr = [str(s) for s in state["instructions"]]
        self._rng.bit_generator.state = json.loads(state["rng"])
        if self._img is not None:
            self._img = torch.as_tensor(np.asarray(state["images"])).to(torch.uint8).clone()
            self._ctx = torch.as_tensor(np.asarray(state["context"])).to(torch.uint8).clone()

    def render(self, env_ids: Sequence[int] | None = None, camera: str | None = None) -> torch.Tensor:
        """uint8 [n, H, W, 3] frames of `camera` (default the first modelled) at the model's size:
        the served frames with obs_mode rgb, else decoded from the current latents."""
        if not self.cfg.cameras:
            raise EnvError("render: this world model was trained without cameras (state only); nothing to render")
        cam = camera or self.cfg.cameras[0]
        if cam not in self.cfg.cameras:
            raise EnvError(f"camera: {cam!r} is not modelled; allowed: {', '.join(self.cfg.cameras)}")
        rows = torch.arange(self.num_envs) if env_ids is None else torch.as_tensor(list(env_ids), dtype=torch.long)
        img = self._img[rows] if self.cameras else decode_frames(self.model, self._z[rows], self._ctx[rows])
        return split_cameras(img, self.cfg.cameras)[cam]


def _gate(path: str) -> dict | None:
    """The quality gate `embodied world-model train` recorded in PATH/report.json, if any."""
    import json
    from pathlib import Path

    try:
        return json.loads((Path(path) / "report.json").read_text()).get("gate")
    except (OSError, ValueError, AttributeError):
        return None
