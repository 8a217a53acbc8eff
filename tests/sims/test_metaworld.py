"""MetaWorld behind the VecEnv contract (sims/metaworld, docs/metaworld.md): names and bad input,
the layout of the observation (task one-hot, instructions), pixels from mujoco's Renderer, the
rewards, and the multi-task protocol with the scripted policies. The contract itself
(shapes, seeding, resume, chunks) runs in test_sims_contract.py. Tests that need a worker skip,
with the reason, without .venv-metaworld (`make metaworld`; `make test` builds it)."""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch

from sims.metaworld.proc import metaworld_python
from sims.metaworld.tasks import INSTRUCTIONS, MT10, MT50, parse_name, tasks_of
from sims.registry import batch_for, expert_for, make_env, task_cycle
from sims.vecenv import EnvError

needs_mw = pytest.mark.skipif(not metaworld_python().exists(), reason=".venv-metaworld is absent (make metaworld)")


def _one_line(fn, *words):
    with pytest.raises(EnvError) as err:
        fn()
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_names_without_a_worker():
    assert len(MT50) == 50 and len(set(INSTRUCTIONS.values())) == 50  # one phrase per task, all distinct
    assert set(MT10) <= set(MT50)
    assert parse_name("metaworld:MT10") == (MT10, MT10)
    assert parse_name("metaworld:MT50/push-v3") == (MT50, ("push-v3",))
    assert parse_name("metaworld:push-v3") == ((), ("push-v3",))
    assert tasks_of("metaworld:MT10")[2] == "metaworld:MT10/pick-place-v3" and len(tasks_of("metaworld:MT50")) == 50
    assert parse_name("metaworld:MT10@goal") == (MT10, MT10)
    assert parse_name("metaworld:push-v3@goal") == ((), ("push-v3",))
    assert tasks_of("metaworld:MT10@goal")[1] == "metaworld:MT10/push-v3@goal"
    _one_line(lambda: make_env("metaworld:MT10@objects", 1), "variant", "objects", "@goal")
    _one_line(lambda: make_env("metaworld:MT11", 1), "task", "MT11", "allowed")
    _one_line(lambda: make_env("metaworld:MT10/sweep-v3", 1), "sweep-v3", "MT10", "allowed")
    _one_line(lambda: make_env("metaworld:push-v3", 1, obs_mode="depth"), "obs_mode", "allowed")
    _one_line(lambda: make_env("metaworld:push-v3", 1, obs_mode="rgb", cameras=("front",)), "cameras", "corner2")
    _one_line(lambda: make_env("metaworld:push-v3", 2, num_workers=3), "num_workers", "1..2")
    _one_line(lambda: make_env("metaworld:push-v3", 1, max_episode_steps=501), "max_episode_steps", "500")
    _one_line(lambda: make_env("metaworld:push-v3", 1, randomization={}), "env.randomization", "MetaWorld")


def test_batches_hold_every_task():
    """Env i of a benchmark runs task i mod n: evaluation and collection batches hold each task
    equally often (a 64-env MT50 batch would run 14 tasks twice as often as the other 36); a
    multi: batch is a multiple of its number of tasks."""
    assert [task_cycle(t) for t in ("metaworld:MT50@goal", "metaworld:MT10", "metaworld:MT10/push-v3",
                                    "PushCube")] == [50, 10, 1, 1]
    assert batch_for("metaworld:MT50", 250, 64) == 50 and batch_for("metaworld:MT50", 10, 64) == 50
    assert batch_for("metaworld:MT10@goal", 50, 64) == 50 and batch_for("metaworld:MT10", 96, 64) == 60
    assert batch_for("PushCube", 96, 64) == 64 and batch_for("Compose", 20, 64) == 20
    assert task_cycle("multi:Reach+PushCube+Compose") == 3  # three equal blocks of rows
    assert batch_for("multi:Reach+PushCube+Compose", 50, 64) == 48


def test_protocol_runs_a_checkpoint_for_the_tasks_own_time_limit():
    """A checkpoint trained with episodes cut at 150 steps is read by the protocols (MetaWorld's,
    LIBERO's) at the task's own limit: max_episode_steps null, which a MetaWorld env makes 500
    (test_mt10_layout_instructions_and_staged_reward)."""
    from embodied.config import EnvConfig
    from embodied.eval.suite_protocol import protocol_env

    cfg = protocol_env(EnvConfig(task="metaworld:MT10@goal", max_episode_steps=150, obs_mode="rgb"),
                       "metaworld:MT10/push-v3@goal")
    assert (cfg.task, cfg.max_episode_steps, cfg.obs_mode) == ("metaworld:MT10/push-v3@goal", None, "rgb")


@needs_mw
def test_mt10_layout_instructions_and_staged_reward():
    env = make_env("metaworld:MT10", 10, reward_mode="staged", num_workers=2)
    try:
        obs, _ = env.reset(seed=0)
        assert env.spec.privileged_dim == 49 and env.spec.max_episode_steps == 500 and env.spec.control_hz == 80
        assert obs["instruction"] == [INSTRUCTIONS[t] for t in MT10]
        hot = obs["privileged"][:, 39:]
        assert torch.equal(hot, torch.eye(10))  # env i runs task i, its one-hot says so
        assert torch.equal(obs["state"], obs["privileged"][:, :4])
        goal = obs["privileged"][:, 36:39]
        assert (goal.abs().sum(1) > 0).all()  # the goal is visible
        rewards = torch.stack([env.step(torch.zeros(10, 4)).reward for _ in range(3)])
        assert ((rewards >= 0) & (rewards <= 1)).all() and (rewards > 0).any()  # MetaWorld's shaping / 10
    finally:
        env.close()


@needs_mw
def test_dense_reward_is_shaping_of_metaworld_reward_and_resumes():
    """dense = S_t - S_t-1 + 1[success] with S MetaWorld's own reward (staged), across chunk
    boundaries; an env restored mid-episode gives the same rewards as the one it came from."""
    dense, staged = (make_env("metaworld:push-v3", 1, reward_mode=m, num_workers=1) for m in ("dense", "staged"))
    ex, resumed = expert_for("metaworld:push-v3"), None
    try:
        obs, _ = dense.reset(seed=3)
        staged.reset(seed=3)
        d, s, won = [], [], torch.zeros(0, dtype=torch.bool)
        for chunk in range(60):  # chunks of 4 actions, the expert's action held for the chunk
            a = torch.from_numpy(ex(obs["privileged"].numpy()))[:, None].expand(1, 4, 4).float().contiguous()
            if chunk == 5:
                resumed = make_env("metaworld:push-v3", 1, reward_mode="dense", num_workers=1)
                resumed.load_state_dict(dense.state_dict())
                assert torch.equal(resumed.chunk_step(a).reward, dense.chunk_step(a).reward)  # dense's start is restored
                staged.chunk_step(a)
                continue
            rd, rs = dense.chunk_step(a), staged.chunk_step(a)
            assert torch.equal(rd.valid, rs.valid)
            if chunk != 6:  # the chunk after the restore check lost its predecessor's rewards
                d.append(rd.reward[rd.valid].double())
                s.append(rs.reward[rs.valid].double())
                won = torch.cat([won, rd.info["success"][rd.valid]])
            obs = rd.obs
            if rd.done.any():
                break
        d, s = torch.cat(d), torch.cat(s)
        assert won[-1] and not won[:-1].any(), "the scripted push policy succeeds within 240 steps"
        inner = torch.ones_like(d, dtype=torch.bool)
        inner[0] = False
        inner[20:25] = False  # the steps around the restore check are not consecutive in d and s
        expect = s - torch.cat([s[:1], s[:-1]]) + won.double()
        assert torch.allclose(d[inner], expect[inner], atol=1e-5)
        assert ((s >= 0) & (s <= 1)).all() and d[-1] > 0.9  # the success step pays its bonus
    finally:
        for e in (dense, staged, resumed):
            if e is not None:
                e.close()
        ex.close()


@needs_mw
def test_pixels_cameras_and_size():
    env = make_env("metaworld:MT10", 2, obs_mode="rgb", cameras=("corner2", "gripperPOV"), image_size=(48, 64),
                   num_workers=1)
    try:
        obs, _ = env.reset(seed=[1, 2])
        for cam in ("corner2", "gripperPOV"):
            img = obs[f"rgb_{cam}"]
            assert img.shape == (2, 48, 64, 3) and img.dtype == torch.uint8 and img.float().std() > 10
        assert not torch.equal(obs["rgb_corner2"], obs["rgb_gripperPOV"])
        before = obs["rgb_corner2"].clone()
        act = torch.tensor([[1.0, 0.0, -1.0, 1.0]] * 2)
        for _ in range(10):
            obs = env.step(act).obs
        assert (obs["rgb_corner2"].float() - before.float()).abs().mean() > 0.5  # the arm moved in the picture
        assert torch.equal(env.render([1], camera="gripperPOV"), obs["rgb_gripperPOV"][1:])
        # the corner cameras' up axis points down in MetaWorld's scenes: frames come upright, the
        # table (lower part of the view) below the background
        _one_line(lambda: env.render([0], camera="topview"), "camera", "allowed")
    finally:
        env.close()


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
@needs_mw
def test_envs_of_a_task_share_a_renderer_pixel_exactly():
    """A worker renders all envs of one task with one renderer; the second env of each MT10 task
    (layout seed 100 + i) gives the frames that an env rendering with its own renderer gives."""
    shared = make_env("metaworld:MT10", 20, obs_mode="rgb", image_size=48, num_workers=1)
    own = make_env("metaworld:MT10", 10, obs_mode="rgb", image_size=48, num_workers=1)
    try:
        seeds = [100 + i for i in range(10)]
        a, _ = shared.reset(seed=list(range(10)) + seeds)
        b, _ = own.reset(seed=seeds)
        assert torch.equal(a["rgb_corner2"][10:], b["rgb_corner2"])
        assert not torch.equal(a["rgb_corner2"][:10], b["rgb_corner2"])  # other layouts, other frames
        g = torch.Generator().manual_seed(0)
        for _ in range(5):
            act = torch.rand(10, 4, generator=g) * 2 - 1
            a = shared.step(torch.cat([act, act])).obs
            b = own.step(act).obs
        assert torch.equal(a["rgb_corner2"][10:], b["rgb_corner2"])
    finally:
        shared.close()
        own.close()


@needs_mw
def test_expert_solves_every_mt10_task():
    """MetaWorld's scripted policies as our expert: one MT10 batch (env i = task i), each solved;
    with "@goal" the state holds the hand, the gripper and the goal at every step."""
    env, ex = make_env("metaworld:MT10@goal", 10, num_workers=1), expert_for("metaworld:MT10@goal")
    try:
        obs, _ = env.reset(seed=list(range(10)))
        assert env.spec.state_dim == 7
        won, done = np.zeros(10, bool), np.zeros(10, bool)
        for _ in range(env.spec.max_episode_steps):
            priv = obs["privileged"]
            assert torch.equal(obs["state"], torch.cat([priv[:, :4], priv[:, 36:39]], 1))
            r = env.step(torch.from_numpy(ex(priv.numpy())))
            new = r.done.numpy() & ~done
            won[new], done = r.terminated.numpy()[new], done | new
            obs = r.obs
            if done.all():
                break
        assert won.all(), [t for t, w in zip(MT10, won) if not w]
    finally:
        env.close()
        ex.close()


@needs_mw
def test_balanced_demos(tmp_path):
    """collect --balanced on MT10: each task gets episodes // 10 demos, whatever its envs and
    episode lengths (reach's 45-step episodes would otherwise crowd out peg-insert-side's)."""
    from collections import Counter

    from embodied.data.collect import collect_demos
    from embodied.data.layout import read_episode_rows

    out = collect_demos("metaworld:MT10", 10, tmp_path / "d", num_envs=10, noise=0.3, balanced=True, progress=False)
    assert out["episodes"] == 10
    # the expert's own rate: episodes dropped because their task had its share still count as successes
    assert out["expert_success_rate"] > out["episodes"] / out["attempted"]
    rows = read_episode_rows(tmp_path / "d", 10)
    assert Counter(r["tasks"][0] for r in rows) == Counter({INSTRUCTIONS[t]: 1 for t in MT10})
    _one_line(lambda: collect_demos("PushCube", 4, tmp_path / "p", balanced=True, progress=False), "--balanced",
              "PushCube", "MT10")


@needs_mw
def test_protocol_report(tmp_path):
    """The papers' protocol (fixed seeds per task, mean over tasks) written as a report folder."""
    from embodied.eval.metaworld_protocol import run_expert

    report = run_expert("metaworld:MT10/pick-place-v3", tmp_path, episodes=3, num_envs=3, log=lambda s: None)
    res = json.loads((tmp_path / "results.json").read_text())
    assert [(e["task"], e["seed"]) for e in res["episodes"]] == [("MT10/pick-place-v3", k) for k in range(3)]
    assert all(e["success"] for e in res["episodes"])
    assert res["protocol"]["mean_over_tasks"]["scripted_expert"].startswith("1.000")
    assert res["protocol"]["simulator_versions"]["metaworld"] == "3.1.1"
    assert res["protocol"]["max_episode_steps"] == 500 and res["protocol"]["seeds"] == [0, 1, 2]
    assert "MT10/pick-place-v3" in report.read_text()

    # a signal stops the protocol after the task it is in, with the folder of the tasks done
    from embodied.run.stop import Stopped

    def interrupt(line: str) -> None:  # the log line that ends the first task
        os.kill(os.getpid(), signal.SIGINT)

    with pytest.raises(Stopped) as stop:
        run_expert("metaworld:MT10", tmp_path / "stopped", episodes=2, num_envs=2, log=interrupt)
    res = json.loads((tmp_path / "stopped" / "results.json").read_text())
    assert [(e["task"], e["seed"]) for e in res["episodes"]] == [("MT10/reach-v3", 0), ("MT10/reach-v3", 1)]
    assert "2 episodes" in stop.value.line() and str(tmp_path / "stopped") in stop.value.line()
    assert (tmp_path / "stopped" / "report.md").is_file()


@needs_mw
def test_expert_rejects_a_wrong_layout_and_a_dead_worker_is_named():
    ex = expert_for("metaworld:MT10")
    try:
        _one_line(lambda: ex(np.zeros((2, 39))), "privileged", "49")
    finally:
        ex.close()
    env = make_env("metaworld:push-v3", 1)
    try:
        env.workers[0].proc.kill()
        env.workers[0].proc.wait()
        _one_line(lambda: env.step(torch.zeros(1, 4)), "metaworld", "died", "push-v3")
    finally:
        env.close()


@needs_mw
def test_state_training_runs_on_the_defaults(tmp_path, capsys):
    """`embodied train` from state on a MetaWorld task with the default train.video_episodes: the
    env cannot render, which is said in one line, and the run trains and evaluates."""
    from embodied.cli import main

    run = tmp_path / "run"
    assert main(["train", "env.task=metaworld:reach-v3", "env.num_envs=4", "ppo.rollout_steps=8", "ppo.minibatches=1",
                 "ppo.epochs=1", "train.total_steps=32", "train.eval_episodes=2", "train.progress=false",
                 "env.max_episode_steps=16", f"train.run_dir={run}"]) == 0
    err = capsys.readouterr().err
    assert sum(line.startswith("train.video_episodes:") for line in err.splitlines()) == 1
    assert (run / "checkpoints" / "latest").exists()
