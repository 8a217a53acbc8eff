"""actor.lockstep over the real link (a local socket): the learner does exactly the updates due
for each transition before it says "synced", and pushes weights every push_every_s of robot
time."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

from embodied.robot_rl.config import load_finetune_config
from embodied.robot_rl.learner_process import Learner, prepare
from embodied.robot_rl.link import ActorLink, to_wire

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pair(tmp_path):
    """A learner serving in a thread, connected to an ActorLink; yields (link, learner)."""
    from embodied.robot_rl.data import save_policy
    from embodied.robot_rl.networks import TanhGaussianActor

    save_policy(tmp_path / "start.safetensors", TanhGaussianActor(15, 4, (64, 64)), 0, (64, 64))
    cfg = load_finetune_config(ROOT / "configs" / "finetune" / "finetune_reach_sim.yaml", [
        f"run_dir={tmp_path / 'run'}", "demos=null", f"init.weights={tmp_path / 'start.safetensors'}",
        "sac.batch_size=16", "learner.warmup_transitions=20", "learner.critic_warmup_updates=5",
        "learner.push_every_s=0.5"])  # a push every 0.5 s * 20 Hz = 10 transitions
    prepare(cfg)
    link = ActorLink(cfg.run_dir)
    learner = Learner(cfg)
    ended: list[str] = []
    serve = threading.Thread(target=lambda: ended.append(learner.serve(30)), daemon=True)
    serve.start()
    assert _until(lambda: link.connected)
    yield link, learner
    link.send(("stop", "test over"))
    serve.join(10)
    link.close()
    assert ended == ["test over"]


def _until(cond, timeout: float = 20.0) -> bool:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        time.sleep(0.002)
    return cond()


def _transition(i: int) -> dict:
    g = torch.Generator().manual_seed(i)
    return to_wire({"obs": torch.randn(15, generator=g), "action": torch.rand(4, generator=g) * 2 - 1,
                    "reward": torch.tensor(0.0), "next_obs": torch.randn(15, generator=g), "terminated": 0.0,
                    "intervened": float(i % 3 == 0), "version": 0.0, "episode": i // 10, "step": i % 10})


def test_lockstep_one_update_per_transition_and_pushes_in_robot_time(pair):
    link, learner = pair
    for i in range(40):
        link.send(("transition", _transition(i)))
        key = (i // 10, i % 10)
        assert _until(lambda: link.synced >= key), f"no synced for transition {i}"
        assert learner.agent.updates == max(0, i + 1 - 20)  # warm-up 20, then one update per transition
    assert learner.version == 4  # pushes after transitions 10, 20, 30 and 40
