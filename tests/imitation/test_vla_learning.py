"""End-to-end learning from pixels: SFT of the tiny flow VLA on scripted-expert demonstrations
(front and wrist camera images, instruction, proprioceptive state; the goals are NOT in the
state), then closed-loop success in the simulator on held-out seeds.

ReachColor: a red sphere on the left, a blue one on the right, each drawn within a few cm and
seen only in the images; only the instruction says which one to reach. The policy must succeed
far above chance (50%), and swapping "red" <-> "blue" in the instruction must send it to the
other sphere from the same scenes. (Plain Reach from pixels, 98% with 1000 demos, was a second
check of the same mechanism and left the suite for its budget; docs/vla.md, "Learning".)

Measured numbers and how they were found: docs/vla.md, "Learning".
"""

from __future__ import annotations

import pytest
import torch

from embodied.eval.evaluate import evaluate
from embodied.imitation.sft import SFTConfig, build_policy, train_sft
from sims.registry import make_env
from test_vla_demos import build_expert_demos

# a module fixture of about 2.5 minutes (demos and SFT): `make bench-scale`, not `make test`
pytestmark = [pytest.mark.slow, pytest.mark.scale]

CAMS = ["front", "wrist"]
# Demos, SFT steps, actions executed per 4-action chunk (docs/vla.md, "Learning"). Seeds 0-4 of
# this recipe (`python benchmarks/bench_learning_tests.py reach_color --seeds 0,1,2,3,4 --set
# demos=500 steps=1500`; 2026-11-24, 2-core AMD EPYC, one thread): success 0.90-0.98, with the
# instruction swapped 0.90-0.98, closer to the named sphere 1.00 and the wrong sphere 0.00 in
# every run; the floors below sit 0.10 under the worst. 1200 steps gave 0.84-0.88 on seeds 0-2
# (too little margin); 2000 steps cost a third more for 0.90-0.98 on earlier runs.
DEMOS, STEPS, EXECUTE = 500, 1500, 2
EVAL_SEEDS = list(range(10_000, 10_050))


def sft_reach_color(run_dir, seed: int = 0, demos: int = DEMOS, steps: int = STEPS) -> torch.nn.Module:
    """A tiny flow VLA fitted to `demos` expert episodes of ReachColor (DART noise 0.3; demo seeds
    from 1000 * seed), `steps` SFT steps; seeded by seed."""
    torch.set_num_threads(1)  # on 2 shared cores, one thread is several times faster
    train = build_expert_demos("ReachColor", demos, chunk_size=4, seed=1000 * seed, cameras=CAMS, noise_std=0.3)
    cfg = SFTConfig(policy="flow_vla", chunk_size=4, num_steps=5, cameras=CAMS, steps=steps, batch_size=32,
                    lr=1e-3, warmup_steps=50, eval_every=0, save_every=0, execute_steps=EXECUTE,
                    run_dir=str(run_dir), torch_threads=1, seed=seed)
    torch.manual_seed(seed)  # the initial weights (train_sft seeds only what follows)
    policy = build_policy(cfg, train.stats)
    summary = train_sft(policy, train, cfg, log=lambda _: None)
    first, last = sum(summary["loss"][:20]) / 20, sum(summary["loss"][-50:]) / 50
    print(f"ReachColor: {len(train)} items, sft loss {first:.3f} -> {last:.3f}")
    return policy.eval()


def _env():
    return make_env("ReachColor", 10, obs_mode="rgb", cameras=tuple(CAMS), num_threads=1)


@pytest.fixture(scope="module")
def color_policy(tmp_path_factory):
    return sft_reach_color(tmp_path_factory.mktemp("reach_color"))


class _SwappedInstruction:
    """An env whose observations carry "red" <-> "blue" swapped in the instruction."""

    SWAP = {"red": "blue", "blue": "red"}

    def __init__(self, env):
        self.env, self.num_envs, self.spec = env, env.num_envs, env.spec

    def _obs(self, obs):
        swapped = [" ".join(self.SWAP.get(w, w) for w in s.split()) for s in obs["instruction"]]
        return {**obs, "instruction": swapped}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._obs(obs), info

    def chunk_step(self, actions):
        res = self.env.chunk_step(actions)
        res.obs = self._obs(res.obs)
        return res


@torch.no_grad()
def closest_approach(policy, env, seeds: list[int]) -> dict[str, torch.Tensor]:
    """One ReachColor episode per seed (batches of env.num_envs; chunks through chunk_step).

    Returns float [N] "named" / "other": the closest the TCP came to the sphere the env's
    instruction names and to the other one, and bool [N] "success" (the named sphere reached)
    and "fail" (the other one reached; the episode ends there)."""
    B = env.num_envs
    out = {k: [] for k in ("named", "other", "success", "fail")}
    for start in range(0, len(seeds), B):
        obs, _ = env.reset(seed=seeds[start:start + B])
        active = torch.ones(B, dtype=torch.bool)
        best = {"named": torch.full((B,), 9.0), "other": torch.full((B,), 9.0)}
        hit = {"success": torch.zeros(B, dtype=torch.bool), "fail": torch.zeros(B, dtype=torch.bool)}
        while active.any():
            res = env.chunk_step(policy.act(obs, deterministic=True).actions)  # [B, k, A]
            for key, metric in (("named", "dist_to_goal"), ("other", "dist_to_other")):
                d = torch.where(res.valid, res.info[metric], torch.full_like(res.info[metric], 9.0)).min(1).values
                best[key] = torch.where(active, torch.minimum(best[key], d), best[key])
            for key in hit:
                hit[key] |= active & res.info[key].any(1)
            active &= ~res.done
            obs = res.obs
        for key, v in {**best, **hit}.items():
            out[key].append(v)
    return {k: torch.cat(v) for k, v in out.items()}


def instruction_scores(policy, seeds: list[int] = EVAL_SEEDS) -> dict[str, float]:
    """Fractions over seeds, as plain and with red <-> blue swapped in the instruction (same scenes):
    chose / chose_swapped (went closer to the named sphere), success / swapped_success (reached it),
    reached_other / swapped_wrong (reached the other one)."""
    env = _env()
    plain = closest_approach(policy, env, seeds)
    swapped = closest_approach(policy, _SwappedInstruction(env), seeds)
    env.close()
    mean = lambda t: round(t.float().mean().item(), 4)  # noqa: E731
    return {"chose": mean(plain["named"] < plain["other"]), "success": mean(plain["success"]),
            "reached_other": mean(plain["fail"]), "chose_swapped": mean(swapped["other"] < swapped["named"]),
            "swapped_success": mean(swapped["fail"]), "swapped_wrong": mean(swapped["success"])}


def test_instruction_chooses_the_target(color_policy):
    """Far above chance, and swapping red <-> blue in the instruction sends the policy to the
    other sphere (same seeds). Chance: a policy that ignores the instruction heads for the
    named sphere in half of the episodes."""
    env = _env()
    first, again = (evaluate(color_policy, env, EVAL_SEEDS[:10]) for _ in range(2))
    env.close()
    assert first.successes == again.successes and first.lengths == again.lengths  # seeded: reproducible
    s = instruction_scores(color_policy)
    print(f"ReachColor from pixels over {len(EVAL_SEEDS)} seeds: {s}")
    assert s["chose"] >= 0.85 and s["chose_swapped"] >= 0.85  # chance: 0.5
    assert s["success"] >= 0.8 and s["reached_other"] <= 0.1
    assert s["swapped_success"] >= 0.8 and s["swapped_wrong"] <= 0.1
