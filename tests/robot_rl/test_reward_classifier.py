"""The learned success classifier (embodied/robot_rl/reward.py, `embodied reward train`): data
from the actor's recordings (the success frame kept as one more row), the held-out report, the
threshold for a false-positive-rate target, and the one-line errors when a classifier does not
match the robot's observations."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from embodied.cli import main
from embodied.robot_rl.config import config_from_dict
from embodied.robot_rl.data import dataset_transitions, save_policy
from embodied.robot_rl.networks import TanhGaussianActor
from embodied.robot_rl.reward import (RewardError, SuccessClassifier, classifier_for_robot, episode_frames,
                                      report, threshold_for_fpr)
from robot_bridge.robot_env import RobotEnvConfig

ROBOT = {"task": "Reach", "privileged_topic": "/privileged", "privileged_dim": 15, "max_episode_steps": 25,
         "image_topics": {"front": "/camera/image_raw"}, "image_size": [32, 32]}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """12 training episodes of the actor on the in-process Reach twin (front camera 32x32), a
    random policy with the scripted operator taking over: online/ holds successes and failures."""
    from embodied.robot_rl.actor import Actor

    run = tmp_path_factory.mktemp("reward") / "run"
    cfg = config_from_dict({"run_dir": str(run), "robot": ROBOT, "sim": {"seed": 3, "operator": True},
                            "actor": {"episodes": 12, "eval_every": 0}})
    run.mkdir(parents=True)
    torch.manual_seed(0)
    save_policy(run / "policy.safetensors", TanhGaussianActor(15, 4, (16,)), 0, (16,))
    actor = Actor(cfg)
    try:
        summary = actor.run()
    finally:
        actor.close()
    assert summary["exit_code"] == 0 and summary["episodes"] == 12
    return run


def test_recordings_keep_the_success_frame_and_rl_ignores_it(recorded):
    from embodied.data.dataset import read_episodes

    eps = list(read_episodes(recorded / "online"))
    rows = [json.loads(line) for line in (recorded / "progress.jsonl").read_text().splitlines()]
    wins = [bool(e["success"].any()) for e in eps]
    assert sum(wins) > 0, wins
    for ep, row, won in zip(eps, rows, wins):
        s = ep["success"].bool()
        if won:  # the success step, then the frame the success was seen in
            assert s[-2:].tolist() == [True, True] and not s[:-2].any() and len(s) == row["steps"] + 1
        else:
            assert len(s) == row["steps"] == ROBOT["max_episode_steps"]
    frames = episode_frames(recorded / "online", "privileged")
    for (x, y), won in zip(frames, wins):  # label: success reached before this frame
        assert y.tolist() == [False] * (len(y) - 1) + [won]
        if won:  # the kept frame is a success state: the TCP within 2.5 cm of the goal
            assert float(x[-1, -3:].norm()) < 0.025 < float(x[-2, -3:].norm())
    # RL reads transitions only up to the success step: the kept row is not one
    transitions, _ = dataset_transitions(recorded / "online", "privileged")
    assert len(transitions) == sum(r["steps"] - (not w) for r, w in zip(rows, wins))


def test_threshold_meets_the_false_positive_target():
    scores = np.array([0.1, 0.2, 0.3, 0.4, 0.9, 0.95, 0.35, 0.8])
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 0], bool)
    t = threshold_for_fpr(scores, labels, 0.0)
    assert t == 0.8 and not (scores[~labels] > t).any()
    t = threshold_for_fpr(scores, labels, 0.2)  # one negative of five may pass
    assert t == 0.4 and (scores[~labels] > t).sum() == 1
    rep = report(scores, labels, t)  # 2 of 3 positives and 1 of 5 negatives above 0.4
    assert (rep["fpr"], rep["precision"], rep["recall"], rep["f1"]) == (0.2, round(2 / 3, 4), round(2 / 3, 4),
                                                                         round(2 / 3, 4))


def test_reward_train_reports_held_out_metrics_and_checks_the_robot(recorded, tmp_path, capsys):
    out = tmp_path / "clf.safetensors"
    assert main(["reward", "train", str(recorded / "online"), "--out", str(out), "--steps", "150",
                 "--fpr-target", "0.05"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["obs_key"] == "privileged" and rep["shape"] == [15]
    assert sum(rep["episodes"].values()) == 12 and min(rep["episodes"].values()) >= 2
    for part in ("validation", "test"):
        assert set(rep[part]) >= {"auroc", "fpr", "precision", "recall", "f1", "positives", "frames"}
    assert rep["validation"]["fpr"] <= 0.05  # the threshold is chosen for the target on validation
    clf = classifier_for_robot(out, RobotEnvConfig(**{**ROBOT, "image_topics": {}}))
    assert isinstance(clf, SuccessClassifier) and clf.threshold == rep["threshold"]
    x, y = episode_frames(recorded / "online", "privileged")[0]
    assert isinstance(clf({"privileged": x[-1:]}), bool)
    # a robot without the classifier's observation: one line naming what it reads and what there is
    with pytest.raises(RewardError) as e:
        classifier_for_robot(out, RobotEnvConfig(task="Reach"))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("reward_classifier: reads 'privileged' [15]") and "state [9]" in msg


def test_image_classifier_and_a_camera_mismatch_is_one_line(recorded, tmp_path, capsys):
    out = tmp_path / "clf_rgb.safetensors"
    assert main(["reward", "train", str(recorded / "online"), "--out", str(out), "--obs-key", "rgb_front",
                 "--steps", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["shape"] == [32, 32, 3]
    classifier_for_robot(out, RobotEnvConfig(**ROBOT))  # the camera it was trained on: fine
    with pytest.raises(RewardError, match=r"^reward_classifier: reads 'rgb_front' of shape \[32, 32, 3\]; "
                                          r"the robot's is \[64, 64, 3\]$"):
        classifier_for_robot(out, RobotEnvConfig(**{**ROBOT, "image_size": [64, 64]}))
    with pytest.raises(RewardError, match=r"reads 'rgb_front' .*rgb_wrist \[32, 32, 3\]"):
        classifier_for_robot(out, RobotEnvConfig(**{**ROBOT, "image_topics": {"wrist": "/wrist/image_raw"}}))
    # the finetune command refuses before anything runs: one line, exit code 2
    import yaml

    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"), "reward_classifier": str(out),
                                   "robot": {**ROBOT, "image_size": [64, 64], "success": "classifier"},
                                   "init": {"weights": str(recorded / "policy.safetensors")}}))
    assert main(["finetune-robot", str(cfg), "--role", "actor"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("embodied finetune-robot: error: reward_classifier: reads 'rgb_front'"), err


def test_reward_train_errors_are_one_line(recorded, tmp_path, capsys):
    assert main(["reward", "train", str(recorded / "online"), "--out", str(tmp_path / "c"), "--obs-key",
                 "rgb_wrist"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no obs.rgb_wrist" in err[0], err
    with pytest.raises(RewardError, match="^reward_classifier: .* is not a classifier"):
        SuccessClassifier(recorded / "policy.safetensors")
    with pytest.raises(Exception, match="reward_classifier: robot.success 'classifier' needs one"):
        config_from_dict({"robot": {**ROBOT, "success": "classifier"}})


def test_the_actor_asks_the_classifier_instead_of_the_success_topic(recorded, tmp_path, dds_env):
    from embodied.robot_rl.actor import Actor
    from embodied.robot_rl.reward import RewardTrainConfig, train_classifier

    clf_path = tmp_path / "clf.safetensors"
    train_classifier(recorded / "online", clf_path, RewardTrainConfig(steps=100))
    run = tmp_path / "run"
    run.mkdir()
    (run / "policy.safetensors").write_bytes((recorded / "policy.safetensors").read_bytes())
    robot = {**ROBOT, "image_topics": {}, "success": "classifier", "transport": "dds"}
    actor = Actor(config_from_dict({"run_dir": str(run), "robot": robot, "reward_classifier": str(clf_path)}))
    try:
        env = actor.env
        assert isinstance(env.success_fn, SuccessClassifier) and env._succ is None  # no /success subscription
        x, _ = episode_frames(recorded / "online", "privileged")[0]
        for frame in (x[:1], x[-1:]):
            obs = {"privileged": frame}
            assert env._success(obs) == (env.success_fn.score(obs) > env.success_fn.threshold)
    finally:
        actor.link.close()
        actor._progress.close()
        actor.close()


def test_the_in_process_actor_ends_training_episodes_on_the_classifier(recorded, tmp_path):
    """sim: with robot.success: classifier: every recorded frame after a step is the classifier's
    verdict, the run's lines carry the twin's own success, evaluation keeps the twin's."""
    from embodied.data.dataset import read_episodes
    from embodied.robot_rl.actor import Actor
    from embodied.robot_rl.reward import RewardTrainConfig, train_classifier

    clf_path = tmp_path / "clf.safetensors"
    train_classifier(recorded / "online", clf_path, RewardTrainConfig(steps=100))
    clf = SuccessClassifier(clf_path)
    run = tmp_path / "run"
    run.mkdir()
    (run / "policy.safetensors").write_bytes((recorded / "policy.safetensors").read_bytes())
    cfg = config_from_dict({"run_dir": str(run), "robot": {**ROBOT, "image_topics": {}, "success": "classifier"},
                            "reward_classifier": str(clf_path), "sim": {"seed": 3, "operator": True},
                            "actor": {"episodes": 4, "eval_every": 4, "eval_episodes": 2}})
    actor = Actor(cfg)
    try:
        assert actor.run()["exit_code"] == 0
    finally:
        actor.close()
    rows = [json.loads(line) for line in (run / "progress.jsonl").read_text().splitlines()]
    episodes = [r for r in rows if r["kind"] == "episode"]
    assert len(episodes) == 4 and all({"twin_success", "twin_success_step"} <= set(r) for r in episodes)
    assert not any("twin_success" in r for r in rows if r["kind"] == "eval")
    for ep, row in zip(read_episodes(run / "online"), episodes):
        after = [clf({"privileged": x[None]}) for x in ep["obs.privileged"][1:]]  # the frames after each step
        assert after == [False] * (len(after) - 1) + [row["success"]], (after, row)
        assert row["twin_success"] == (row["twin_success_step"] is not None)
