"""Thin adapters that let the peers' PPO train on our MuJoCo VecEnv (benchmark-only imports).

stable-baselines3 needs its own VecEnv (numpy arrays, a list of info dicts, the finished
episode's last observation in info["terminal_observation"] and time-outs flagged by
info["TimeLimit.truncated"], from which its PPO bootstraps); rsl_rl needs an rsl_rl VecEnv
(TensorDict observations, extras["time_outs"]). Both see the privileged state only. Our env
resets finished envs inside step(), which is what both peers expect of a vectorised env.

For evaluation with embodied.eval.evaluate, each peer's deterministic actor is wrapped as an object
with act(obs, deterministic) -> ActOutput.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from policies.base import ActOutput

OBS_KEY = "privileged"


def make_sb3_vecenv(env: Any, seed: int):
    """Our MujocoVecEnv as a stable_baselines3 VecEnv (imported late: a bench-only dependency)."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv as Sb3VecEnv

    class Sb3Adapter(Sb3VecEnv):
        def __init__(self, env: Any, seed: int):
            obs_space = gym.spaces.Box(-np.inf, np.inf, (env.spec.privileged_dim,), np.float32)
            act_space = gym.spaces.Box(env.spec.action_low, env.spec.action_high, (env.spec.action_dim,),
                                       np.float32)
            super().__init__(env.num_envs, obs_space, act_space)
            self.env, self._seed, self._actions = env, seed, None

        def reset(self) -> np.ndarray:
            obs, _ = self.env.reset(seed=self._seed)
            return obs[OBS_KEY].numpy()

        def step_async(self, actions: np.ndarray) -> None:
            self._actions = torch.as_tensor(actions, dtype=torch.float32)

        def step_wait(self):
            res = self.env.step(self._actions)
            done = res.done.numpy()
            infos: list[dict[str, Any]] = [{} for _ in range(self.num_envs)]
            if res.final_obs is not None:
                final = res.final_obs[OBS_KEY].numpy()
                timeout = (res.truncated & ~res.terminated).numpy()
                for i in np.flatnonzero(done):
                    infos[i] = {"terminal_observation": final[i], "TimeLimit.truncated": bool(timeout[i])}
            return res.obs[OBS_KEY].numpy(), res.reward.numpy(), done, infos

        def close(self) -> None:
            self.env.close()

        def get_attr(self, attr_name: str, indices=None) -> list[Any]:
            return [getattr(self, attr_name, None)] * len(self._get_indices(indices))

        def set_attr(self, attr_name: str, value: Any, indices=None) -> None:
            setattr(self, attr_name, value)

        def env_method(self, method_name: str, *args, indices=None, **kwargs) -> list[Any]:
            raise NotImplementedError(f"{method_name}: the benchmark's adapter has no per-env methods")

        def env_is_wrapped(self, wrapper_class: type, indices=None) -> list[bool]:
            return [False] * len(self._get_indices(indices))

    return Sb3Adapter(env, seed)


class Sb3EvalPolicy:
    """SB3's deterministic actor (the Gaussian mean, clipped to the action box, as predict()
    does), on observations normalised by the training VecNormalize's statistics (not updated)."""

    def __init__(self, model: Any, vecnorm: Any):
        self.model, self.vecnorm = model, vecnorm

    def act(self, obs: dict[str, Any], deterministic: bool = True) -> ActOutput:
        x = obs[OBS_KEY].numpy()
        if self.vecnorm is not None:
            x = self.vecnorm.normalize_obs(x)
        actions, _ = self.model.predict(x, deterministic=deterministic)  # [B, A]
        return ActOutput(actions=torch.as_tensor(actions, dtype=torch.float32)[:, None], log_prob=None,
                         value=None, replay={})


def make_rsl_rl_vecenv(env: Any, seed: int):
    """Our MujocoVecEnv as an rsl_rl.env.VecEnv (imported late: a bench-only dependency)."""
    from rsl_rl.env import VecEnv as RslVecEnv
    from tensordict import TensorDict

    class RslRlAdapter(RslVecEnv):
        """rsl_rl bootstraps time-outs itself from extras["time_outs"] (it adds gamma * V(s_t)
        to the last reward, s_t the observation the action was taken in)."""

        def __init__(self, env: Any, seed: int):
            self.env = env
            self.num_envs = env.num_envs
            self.num_actions = env.spec.action_dim
            self.max_episode_length = env.spec.max_episode_steps
            self.episode_length_buf = torch.zeros(env.num_envs, dtype=torch.long)
            self.device = env.device
            self.cfg = {"task": env.spec.task, "num_envs": env.num_envs}
            obs, _ = env.reset(seed=seed)
            self._obs = self._td(obs)

        def _td(self, obs: dict[str, Any]) -> TensorDict:
            return TensorDict({OBS_KEY: obs[OBS_KEY]}, batch_size=[self.num_envs], device=self.device)

        def get_observations(self) -> TensorDict:
            return self._obs

        def step(self, actions: torch.Tensor):
            res = self.env.step(actions)
            done = res.terminated | res.truncated
            self.episode_length_buf += 1
            self.episode_length_buf[done] = 0
            self._obs = self._td(res.obs)
            extras = {"time_outs": res.truncated, "log": {"/success": res.info["success"].float()}}
            return self._obs, res.reward, done, extras

    return RslRlAdapter(env, seed)


class RslRlEvalPolicy:
    """rsl_rl's actor for embodied.eval.evaluate: deterministic actions are the Gaussian mean."""

    def __init__(self, actor: torch.nn.Module):
        self.actor = actor

    @torch.no_grad()
    def act(self, obs: dict[str, Any], deterministic: bool = True) -> ActOutput:
        from tensordict import TensorDict

        td = TensorDict({OBS_KEY: obs[OBS_KEY]}, batch_size=[obs[OBS_KEY].shape[0]])
        mean = self.actor(td, stochastic_output=not deterministic)
        return ActOutput(actions=mean.unsqueeze(1), log_prob=None, value=None, replay={})
