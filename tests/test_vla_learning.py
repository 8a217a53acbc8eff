"""End-to-end: SFT of the tiny VLAs on expert demonstrations of Reach (images of the front
and wrist cameras, instruction, state), then held-out action quality and closed-loop
success in the simulator.

Measured (2 shared CPU cores, 1 torch thread, 800 steps): held-out first-action cosine
with the expert about 0.7, but closed-loop success only about 0-10%: the goal sphere is
1-2 pixels in the 64x64 front image and its depth along the camera ray is not observable
from it, so 2.5 cm precision needs far more training than this budget (see docs/vla.md).
The test therefore asserts what SFT reliably achieves here (actions learned from pixels
and state, clearly better than the best constant) and prints the success rate.
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
    with torch.no_grad():
        a = policy.act({k: v for k, v in b.items() if k != "actions"}, deterministic=True).actions
    t = b["actions"][..., :3]
    mse = ((a[..., :3] - t) ** 2).mean().item()
    const = ((t - t.mean((0, 1))) ** 2).mean().item()
    cos = torch.nn.functional.cosine_similarity(a[:, 0, :3], t[:, 0], dim=-1).mean().item()
    return mse, const, cos


@pytest.mark.parametrize("name", ["flow_vla", "ar_vla"])
def test_sft_on_reach_demos(tmp_path, demos, name):
    train, held = demos
    cfg = SFTConfig(policy=name, chunk_size=4, num_steps=5, cameras=CAMS, steps=800, batch_size=32,
                    lr=1e-3, warmup_steps=50, eval_every=0, save_every=0, eval_episodes=20,
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
