"""The VLA path of on-robot RL (embodied/robot_rl/residual.py): a bounded residual on a frozen
flow VLA. At the start the executed action is exactly the VLA's; any residual keeps it within
residual.scale of the VLA's; the actor and learner run it end to end on the in-process twin and
the learner rebuilds the residual transitions from the recordings. A randomly initialised tiny
flow VLA stands in for an SFT'd one (the lift itself: docs/robot_rl.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from embodied.robot_rl.config import FinetuneConfigError, config_from_dict
from embodied.robot_rl.data import dataset_transitions
from embodied.robot_rl.residual import BasePolicy, ResidualConfig, compose, residual_of, zero_residual_actor
from embodied.robot_rl.sim_robot import SimConfig, SimRobot
from policies.vla.config import FlowVLAConfig
from policies.vla.flow import FlowVLA
from robot_bridge.robot_env import RobotEnvConfig
from sims.vecenv import EnvError

ROOT = Path(__file__).resolve().parents[2]
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
               "image_size": 32, "patch_size": 16}
CAMS = {"front": "/front/image_raw", "wrist": "/wrist/image_raw"}


@pytest.fixture(scope="module")
def vla_dir(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("vla") / "final"
    cfg = FlowVLAConfig(vision=dict(TINY_VISION), cameras=["front", "wrist"], num_steps=2, execute_steps=2,
                        instructions=["reach the red sphere"])
    FlowVLA(cfg).save_pretrained(path)
    return path


def robot(**kw) -> RobotEnvConfig:
    return RobotEnvConfig(task="Reach", privileged_topic="/privileged", privileged_dim=15, max_episode_steps=20,
                          **{"image_topics": CAMS, "image_size": (32, 32), **kw})


def test_the_residual_starts_at_the_vlas_action_and_stays_within_its_bound(vla_dir):
    torch.manual_seed(0)
    rc = ResidualConfig(base=str(vla_dir), scale=0.25)
    base, twin = BasePolicy(rc, 4), SimRobot(robot(), SimConfig(seed=3))
    actor = zero_residual_actor(torch.randn(50, 15), 15, 4, (32, 32))
    obs, _ = twin.reset()
    base.check(obs)
    for step in range(6):
        if step % 2 == 0:  # execute_steps 2: a new chunk every other step, deterministic
            own = base.vla.act(obs, deterministic=True).actions[0]
        b = base.next(obs)
        assert torch.equal(b[0], own[step % 2])
        r, _ = actor.sample(torch.cat([obs["privileged"].float(), b], -1), deterministic=True)
        assert torch.equal(r, torch.zeros_like(r))  # version 0: exactly the VLA's action
        assert torch.equal(compose(b, r, rc.scale), b)
        obs = twin.step(compose(b, r, rc.scale)).obs
    b = torch.rand(1000, 4) * 2 - 1
    r = torch.rand(1000, 4) * 2 - 1
    a = compose(b, r, rc.scale)
    assert ((a - b).abs() <= rc.scale + 1e-6).all() and (a.abs() <= 1).all()
    inside = (b + rc.scale * r).abs() < 1
    assert torch.allclose(residual_of(a, b, rc.scale)[inside], r[inside], atol=1e-5)
    twin.close()


def test_the_residuals_normalisation_leaves_dims_the_demos_never_change_unscaled():
    obs = torch.randn(50, 5)
    obs[:, 3] = -1.0  # a gripper command the demonstrations never change
    obs[:, 4] = 0.02 + 1e-4 * torch.randn(50)
    old, new = zero_residual_actor(obs, 5, 4, (8,)), zero_residual_actor(obs, 5, 4, (8,), min_std=0.01)
    assert torch.allclose(new.norm.mean[:5], obs.mean(0)) and torch.equal(new.norm.mean[5:], torch.zeros(4))
    assert torch.allclose(new.norm.std[:3], obs.std(0)[:3]) and torch.equal(new.norm.std[3:], torch.ones(6))
    assert torch.allclose(old.norm.std[3], torch.tensor(1e-3))  # min_std 0: std floored at 1e-3 (+-10 at the input)
    x = torch.cat([obs[:1], torch.zeros(1, 4)], -1)
    x[0, 3] = -0.9
    assert new.norm(x)[0, 3].item() == pytest.approx(0.1, abs=1e-5) and old.norm(x)[0, 3].item() == 10.0


def test_residual_config_and_camera_errors_are_one_line(vla_dir, tmp_path):
    with pytest.raises(FinetuneConfigError, match=r"^residual\.scale: must be in \(0, 2\], got 0"):
        config_from_dict({"residual": {"base": str(vla_dir), "scale": 0}})
    with pytest.raises(FinetuneConfigError, match=r"^residual\.base: a VLA checkpoint directory is needed"):
        config_from_dict({"residual": {"scale": 0.3}})
    with pytest.raises(EnvError, match=r"^residual\.base: .*not a policy directory"):
        BasePolicy(ResidualConfig(base=str(tmp_path)), 4)
    base = BasePolicy(ResidualConfig(base=str(vla_dir)), 4)
    twin = SimRobot(robot(image_topics={"front": "/front/image_raw"}), SimConfig())
    with pytest.raises(EnvError, match=r"^residual\.base: the VLA reads 'rgb_wrist'; "
                                       r"the robot gives \['rgb_front'\]"):
        base.check(twin.reset()[0])
    twin.close()
    twin = SimRobot(robot(image_size=(64, 64)), SimConfig())
    with pytest.raises(EnvError, match=r"^residual\.base: the VLA reads 'rgb_front' at 32 x 32; the robot's is \(64, 64\)"):
        base.check(twin.reset()[0])
    twin.close()


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_finetune_robot_runs_a_residual_and_the_learner_rebuilds_it(vla_dir, tmp_path):
    """Actor and learner processes, lockstep, 3 training episodes: the residual's weights reach
    the actor; every recorded action is within the bound of its base action; the learner reads
    the recordings back as residual transitions."""
    from embodied.robot_rl.learner_process import prepare

    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cfg = yaml.safe_load((ROOT / "configs" / "finetune" / "finetune_reach_residual.yaml").read_text())
    cfg.update(run_dir=str(tmp_path / "run"), demos=None)  # no demos: the residual's input unnormalised
    cfg["residual"].update(base=str(vla_dir), scale=0.2)
    cfg["robot"].update(image_size=[32, 32], max_episode_steps=12)
    cfg["sac"].update(hidden=[32, 32], batch_size=32)
    cfg["actor"].update(episodes=3, eval_every=3, eval_episodes=1)
    cfg["learner"].update(warmup_transitions=5, critic_warmup_updates=0, push_every_s=0.5)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "embodied.cli", "finetune-robot", str(path)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    assert [x["version"] for x in rows if x["kind"] == "eval"][0] == 0
    assert rows[-1]["version"] > 0  # weights of a trained residual reached the actor

    from embodied.data.dataset import read_episodes

    for ep in read_episodes(tmp_path / "run" / "online"):
        acted = ~ep["success"].bool() | (ep["action"].abs().sum(-1) > 0)  # not the kept success frame
        gap = (ep["action"] - ep["base_action"]).abs()[acted & ~ep["intervened"].bool()]  # not the operator's
        assert (gap <= 0.2 + 1e-5).all(), gap.max()
    loaded, episodes = dataset_transitions(tmp_path / "run" / "online", "privileged", residual_scale=0.2)
    assert episodes == [0, 1, 2] and loaded[0]["obs"].shape == (19,) and loaded[0]["action"].abs().max() <= 1
    assert (tmp_path / "run" / "policy.safetensors").exists() and prepare(config_from_dict(cfg)).exists()


def test_successes_as_demos_put_a_successful_episode_into_the_demo_buffer(vla_dir, tmp_path):
    from embodied.robot_rl.learner_process import Learner

    cfg = config_from_dict({"run_dir": str(tmp_path / "run"), "residual": {"base": str(vla_dir)},
                            "robot": {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15},
                            "learner": {"successes_as_demos": True}})
    learner = Learner(cfg)

    def t(ep: int, step: int, success: bool, intervened: bool = False) -> dict:
        return {"obs": torch.zeros(19), "action": torch.zeros(4), "reward": float(success),
                "next_obs": torch.zeros(19), "terminated": float(success), "intervened": float(intervened),
                "version": 0.0, "episode": ep, "step": step}

    for x in [t(0, 0, False), t(0, 1, False), t(1, 0, False), t(1, 1, False, True), t(1, 2, True), t(2, 0, False)]:
        learner._add(x)
    assert len(learner.online) == 6
    assert len(learner.demo) == 3  # episode 1 once (its intervened step is not added twice); not 0 or 2
    assert learner.demo.tensors()["reward"].tolist() == [0.0, 0.0, 1.0]
