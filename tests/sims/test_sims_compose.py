"""The compositional language suite (sims/mujoco/tasks/compose.py): its variants and held-out
split, its phrasings, its experts, and that the instruction matters: a policy that ignores the text
but sees the cubes' colours cannot beat the text-blind chance level (1/6 on Compose, 1/2 on
ComposeHeldOut: compose.text_blind_chance), checked against the sampler and with blind experts
(the contract itself runs for Compose and ComposeHeldOut in test_sims_contract.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sims.mujoco.scene import COLOR_NAMES
from sims.mujoco.tasks.compose import (
    COLORS,
    HELD_OUT,
    PHRASES,
    SEEN,
    VARIANTS,
    VERBS,
    Compose,
    ComposeHeldOut,
    text_blind_chance,
    with_variant,
)
from sims.registry import expert_for, make_env


def _variant(ep: dict, i: int) -> tuple[str, str]:
    return VERBS[ep["verb"][i]], COLOR_NAMES[ep["color"][i]]


def test_variants_and_held_out_split():
    assert len(VARIANTS) == 16 and len(SEEN) == 12 and len(HELD_OUT) == 4
    assert not set(SEEN) & set(HELD_OUT) and set(SEEN) | set(HELD_OUT) == set(VARIANTS)
    # every verb and every colour is seen in 3 combinations and held out in 1
    assert sorted(v for v, _ in HELD_OUT) == sorted(VERBS) and sorted(c for _, c in HELD_OUT) == sorted(COLORS)
    rng = np.random.default_rng(0)
    for cls, allowed in ((Compose, SEEN), (ComposeHeldOut, HELD_OUT)):
        ep = cls().sample_episode(rng, 600)
        got = {_variant(ep, i) for i in range(600)}
        assert got == set(allowed)  # Compose never draws a held-out combination, and vice versa
        named_col = np.where(ep["named"] == 0, ep["cube_color"], ep["cube_b_color"])
        assert np.array_equal(named_col, ep["color"]) and not (ep["cube_color"] == ep["cube_b_color"]).any()
        texts = {cls().instruction(ep, i) for i in range(600)}
        for v, c in allowed:  # every phrasing of every variant comes up, naming the verb's object
            assert sum(t == p.format(c=c) for p in PHRASES[v] for t in texts) == len(PHRASES[v]) >= 3
        assert len(texts) == 3 * len(allowed)


@pytest.mark.parametrize("task", ["Compose", "ComposeHeldOut"])
def test_expert_solves_every_variant(task):
    env, expert = make_env(task, 64), expert_for(task)
    obs, _ = env.reset(seed=list(range(64)))
    variants = [_variant(env._ep, i) for i in range(64)]
    won, done = np.zeros(64, bool), np.zeros(64, bool)
    for _ in range(env.spec.max_episode_steps):
        r = env.step(torch.from_numpy(expert(obs["privileged"].numpy())))
        new = r.done.numpy() & ~done
        won[new], done, obs = r.info["success"].numpy()[new], done | new, r.obs
    assert done.all() and won.mean() >= 0.95, [v for v, w in zip(variants, won) if not w]
    assert set(variants) == set(SEEN if task == "Compose" else HELD_OUT)


def _rollout(env, policy, seeds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(success bool [B], verb int [B], named slot int [B]) of one episode per env."""
    obs, _ = env.reset(seed=seeds)
    verb, named = env._ep["verb"].copy(), env._ep["named"].copy()
    won, done = np.zeros(env.num_envs, bool), np.zeros(env.num_envs, bool)
    for _ in range(env.spec.max_episode_steps):
        r = env.step(torch.from_numpy(policy(obs["privileged"].numpy())))
        new = r.done.numpy() & ~done
        won[new], done, obs = r.info["success"].numpy()[new], done | new, r.obs
    return won, verb, named


@pytest.mark.parametrize("cls, chance", [(Compose, 1 / 6), (ComposeHeldOut, 1 / 2)])
def test_text_blind_chance_is_the_best_guess_from_the_scene(cls, chance):
    """The chance level against the sampler itself: over 12,000 drawn scenes, the best a policy
    that sees only the two cubes' colours can do (per colour pair, the most frequent variant) is
    text_blind_chance, within sampling error."""
    assert text_blind_chance(cls.variants) == pytest.approx(chance)
    ep = cls().sample_episode(np.random.default_rng(1), 12_000)
    pair = np.sort(np.stack([ep["cube_color"], ep["cube_b_color"]], 1), 1) @ np.array([8, 1])  # the scene's colours
    variant = ep["verb"] * 8 + ep["color"]  # what the text asks
    best = sum(np.bincount(variant[pair == p]).max() for p in np.unique(pair))
    assert abs(best / len(variant) - chance) < 0.02


def test_a_colour_reading_blind_policy_reaches_the_held_out_chance():
    """On ComposeHeldOut each colour has one variant, so a policy blind to the text that reads the
    colours does the variant of the lower-ranked colour in the scene: it wins the half of the
    episodes whose named cube has that colour, and nothing else. 1/2 is the chance level there."""
    B = 48
    env = make_env("ComposeHeldOut", B)
    obs, _ = env.reset(seed=list(range(700, 700 + B)))
    ep = env._ep
    held = {COLOR_NAMES.index(c): VERBS.index(v) for v, c in HELD_OUT}
    slot = (ep["cube_b_color"] < ep["cube_color"]).astype(int)  # the cube of the lower colour index
    colour = np.where(slot == 0, ep["cube_color"], ep["cube_b_color"])
    guess_verb = np.array([held[c] for c in colour])
    asked = (ep["verb"] == guess_verb) & (ep["named"] == slot)
    won, done = np.zeros(B, bool), np.zeros(B, bool)
    for _ in range(env.spec.max_episode_steps):
        p = obs["privileged"].numpy()
        act = np.stack([Compose.expert(with_variant(p[i:i + 1], guess_verb[i], slot[i]))[0] for i in range(B)])
        r = env.step(torch.from_numpy(act))
        new = r.done.numpy() & ~done
        won[new], done, obs = r.info["success"].numpy()[new], done | new, r.obs
    assert won[asked].mean() >= 0.9 and not won[~asked].any()
    assert abs(won.mean() - 0.5) <= 3 * math.sqrt(0.25 / B)  # chance, 1/2, not 1/8


def test_a_blind_policy_cannot_beat_chance():
    """Blind policies see the scene but not the text: the expert of one fixed variant ("push the
    cube in slot a onto the square", whatever the instruction), and the mean of the 8 variant
    experts' actions. The first succeeds exactly on the episodes whose instruction happens to ask
    for what it does (the success events are exclusive), so its rate is 1/8 (3 of the 12 seen
    variants push, half of them the cube in slot a), below the colour-reading chance level of
    1/6; the mean action succeeds at nothing."""
    B = 96
    env = make_env("Compose", B)
    seeds = list(range(500, 500 + B))
    won, verb, named = _rollout(env, lambda p: Compose.expert(with_variant(p, 1, 0)), seeds)
    match = (verb == 1) & (named == 0)
    assert won[match].all() and not won[~match].any()
    # the rate stays within a 3-sigma binomial bound of chance (1/8) over these episodes
    assert won.mean() <= 1 / 8 + 3 * math.sqrt(1 / 8 * 7 / 8 / B)

    def mean_policy(p: np.ndarray) -> np.ndarray:
        return np.mean([Compose.expert(with_variant(p, v, s)) for v in range(4) for s in range(2)], axis=0)

    won_mean, _, _ = _rollout(env, mean_policy, seeds)
    assert won_mean.mean() <= 1 / 8
    informed, _, _ = _rollout(env, Compose.expert, seeds)  # the same scenes, the text read
    assert informed.mean() >= 0.95
