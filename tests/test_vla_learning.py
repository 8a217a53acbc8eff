"""End-to-end: SFT of the tiny VLAs on expert demonstrations of Reach (images of the front
and wrist cameras, instruction, state), then held-out action quality and closed-loop
success in the simulator.

Measured (2 shared CPU cores, 1 torch thread; docs/vla.md, "Learning"):
- From pixels (the real task), 800 steps: held-out first-action cosine with the expert
  about 0.7, closed-loop success 0-7% (more demos, a higher learning rate, 96 px images or
  16 px -> 8 px patches do not change that within a few minutes; 128 px images, 1000 demos
  and 1500 steps reach 30% in 5 minutes). Reach's goal is a sphere floating in the air and
  neither camera shows its depth along the front camera's ray: even a perfect reading of its
  direction from the front camera caps success near 30-40% (measured 40-43% with the exact
  ray given as state). The pixel test therefore asserts what SFT reliably achieves (actions
  learned from pixels and state, clearly better than the best constant) and prints success.
- With the goal offset given as extra state (a diagnostic that takes perception out of the
  loop), the same SFT, normalisation and receding-horizon chunk execution reach >= 80%
  closed-loop success: `test_flow_sft_closes_the_loop_given_the_goal`.
"""

from __future__ import annotations

import pytest
import torch

from embodied.evaluate import evaluate
from embodied.sft import SFTConfig, build_policy, train_sft
from sims.registry import make_env
from test_vla_demos import build_expert_demos

CAMS = ["front", "wrist"]
LIMITS = {"ar_vla": 0.2}  # measured 0.38; an untrained policy is near 0


@pytest.fixture(scope="module")
def demos():
    torch.set_num_threads(1)  # on 2 shared cores, one thread is several times faster
    train = build_expert_demos("Reach", 150, chunk_size=4, seed=0, cameras=CAMS, noise_std=0.3)
    held = build_expert_demos("Reach", 20, chunk_size=4, seed=5000, cameras=CAMS, num_envs=10)
    return train, held


def _action_quality(policy, held) -> tuple[float, float, float]:
    """(mse, mse of the best constant, mean cosine of the first action) on held-out items."""
    b = torch.utils.data.default_collate([held[i] for i in range(len(held))])
    executed, policy.config.execute_steps = policy.config.execute_steps, 0  # judge the whole chunk
    with torch.no_grad():
        a = policy.act({k: v for k, v in b.items() if k != "actions"}, deterministic=True).actions
    policy.config.execute_steps = executed
    t = b["actions"][..., :3]
    mse = ((a[..., :3] - t) ** 2).mean().item()
    const = ((t - t.mean((0, 1))) ** 2).mean().item()
    cos = torch.nn.functional.cosine_similarity(a[:, 0, :3], t[:, 0], dim=-1).mean().item()
    return mse, const, cos


@pytest.mark.parametrize("name", ["flow_vla", "ar_vla"])
def test_sft_on_reach_demos(tmp_path, demos, name):
    train, held = demos
    cfg = SFTConfig(policy=name, chunk_size=4, num_steps=5, cameras=CAMS, steps=800, batch_size=32,
                    lr=1e-3, warmup_steps=50, eval_every=0, save_every=0, eval_episodes=20, execute_steps=2,
                    run_dir=str(tmp_path / name), torch_threads=1)
    env = make_env("Reach", 10, obs_mode="rgb", cameras=tuple(CAMS), num_threads=1)
    policy = build_policy(cfg, train.stats)
    before = _action_quality(policy.eval(), held)
    summary = train_sft(policy, train, cfg, env)
    env.close()
    mse, const, cos = _action_quality(policy, held)
    success = summary["eval"][-1][1]
    print(f"{name}: held-out mse {mse:.3f} (constant {const:.3f}, before {before[0]:.3f}), "
          f"cosine {cos:.2f}, Reach success {success:.2f}")
    first, last = sum(summary["loss"][:20]) / 20, sum(summary["loss"][-50:]) / 50
    print(f"{name}: sft loss {first:.3f} -> {last:.3f}")
    assert last < 0.6 * first
    if name == "flow_vla":
        assert mse < 0.8 * const and cos > 0.5
    else:  # argmax over saturated (+-1) bins: a wrong sign costs a lot of mse; judge the direction
        assert cos > LIMITS[name]
    env = make_env("Reach", 10, obs_mode="rgb", cameras=tuple(CAMS), num_threads=1)
    again = evaluate(policy, env, list(range(10_000, 10_020)))  # seeded: reproducible
    env.close()
    assert again.success_rate == success


class _GoalInState:
    """Env wrapper for the diagnostic below: obs["state"] gets the goal offset (goal - TCP, from
    the privileged obs) appended, so the policy does not have to find the goal in the images."""

    def __init__(self, env):
        self.env, self.num_envs, self.spec = env, env.num_envs, env.spec

    @staticmethod
    def state(obs):
        return torch.cat([obs["state"], obs["privileged"][:, 12:15]], dim=1)

    def _obs(self, obs):
        return {**obs, "state": self.state(obs)}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._obs(obs), info

    def chunk_step(self, actions):
        res = self.env.chunk_step(actions)
        res.obs = self._obs(res.obs)
        return res

    def step(self, actions):
        res = self.env.step(actions)
        res.obs = self._obs(res.obs)
        return res

    def close(self):
        self.env.close()


def test_flow_sft_closes_the_loop_given_the_goal(tmp_path):
    """SFT + normalisation + time alignment of demos + receding-horizon chunk execution work
    end to end: with the goal's position observable (appended to the state), the flow VLA
    reaches Reach's goal in >= 80% of 30 seeded episodes. (From pixels alone the goal's depth
    is not observable; see the module doc.)"""
    from policies.vla.config import FlowVLAConfig, make_config
    from policies.vla.flow import FlowVLA

    torch.set_num_threads(1)
    train = build_expert_demos("Reach", 150, chunk_size=4, seed=0, noise_std=0.3, state_fn=_GoalInState.state)
    policy = FlowVLA(make_config(FlowVLAConfig, chunk_size=4, num_steps=5, state_dim=12, execute_steps=2))
    policy.set_stats(train.stats)
    cfg = SFTConfig(policy="flow_vla", steps=400, batch_size=32, lr=1e-3, warmup_steps=50, eval_every=0,
                    save_every=0, run_dir=str(tmp_path / "goal"), torch_threads=1)
    train_sft(policy, train, cfg, log=lambda _: None)
    env = _GoalInState(make_env("Reach", 10, obs_mode="rgb", num_threads=1))
    res = evaluate(policy, env, list(range(10_000, 10_030)))
    env.close()
    print(f"flow_vla, goal in state: Reach success {res.success_rate:.2f}")
    assert res.success_rate >= 0.8
