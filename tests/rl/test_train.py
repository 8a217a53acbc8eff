"""The training loop: determinism, exact resume after a kill, CLI errors."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from embodied.cli import main
from embodied.config import load_config
from embodied.rl.train import train

ROOT = Path(__file__).resolve().parents[2]
TINY = ["env.task=PushCube", "env.num_envs=16", "ppo.rollout_steps=16", "ppo.minibatches=2", "ppo.epochs=2",
        "policy.hidden_sizes=[64,64]", "train.eval_every=0", "train.eval_episodes=4", "train.video_episodes=0",
        "train.progress=false", "train.torch_threads=1"]  # same threads in and out of process


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run_dir / "checkpoints" / latest / "policy" / "model.safetensors"))


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_same_seed_same_result(tmp_path):
    runs = []
    for name in ("a", "b"):
        cfg = load_config(None, TINY + ["train.total_steps=1024", f"train.run_dir={tmp_path / name}"])
        train(cfg)
        runs.append(final_weights(tmp_path / name))
    assert_same_weights(*runs)
    cfg = load_config(None, TINY + ["train.total_steps=1024", "train.seed=1", f"train.run_dir={tmp_path / 'c'}"])
    train(cfg)
    other = final_weights(tmp_path / "c")
    assert not torch.equal(other["actor.0.weight"], runs[0]["actor.0.weight"])


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_killed_and_resumed_run_matches_uninterrupted(tmp_path):
    steps = ["train.total_steps=12288", "train.save_every=1"]  # 48 iterations of 256 steps
    cfg = load_config(None, TINY + steps + [f"train.run_dir={tmp_path / 'full'}"])
    train(cfg)

    run = tmp_path / "killed"
    cmd = [sys.executable, "-m", "embodied.cli", "train", *TINY, *steps, f"train.run_dir={run}"]
    # `train CONFIG overrides`: with no config file, the first override goes through main()'s handling.
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    latest = run / "checkpoints" / "latest"
    deadline = time.time() + 120
    while time.time() < deadline:
        if latest.exists() and int(latest.read_text().strip().split("_")[1]) >= 8:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = int(latest.read_text().strip().split("_")[1])
    assert 8 <= killed_at < 48, f"kill landed at iteration {killed_at}"

    assert main(["train", "--resume", str(run), "train.progress=false"]) == 0
    assert_same_weights(final_weights(tmp_path / "full"), final_weights(run))


@pytest.mark.parametrize("argv,needle", [
    (["train", "configs/ppo/quickstart.yaml", "ppo.lrr=1"], "unknown config key 'ppo.lrr'"),
    (["train", "configs/ppo/quickstart.yaml", "env.obs_mode=depth"], "env.obs_mode: 'depth' is not allowed"),
    (["train", "configs/ppo/quickstart.yaml", "env.task=FlyToMoon"], "unknown task 'FlyToMoon'"),
    (["train", "configs/nope.yaml"], "config file not found"),
    (["eval", "runs/does-not-exist"], "checkpoint not found"),
    (["collect", "FlyToMoon", "--episodes", "2", "--out", "OUT"], "unknown task 'FlyToMoon'"),
])
def test_cli_bad_input_one_line_exit_2(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    argv = [a.replace("OUT", str(out)) for a in argv]
    if argv[0] == "train":
        argv.append(f"train.run_dir={tmp_path / 'run'}")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = main(argv)
    finally:
        os.chdir(cwd)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists() and not out.exists()  # nothing written


def test_eval_command_reports_and_writes_video(tmp_path, capsys):
    cfg = load_config(None, TINY + ["train.total_steps=512", f"train.run_dir={tmp_path / 'run'}"])
    train(cfg)
    capsys.readouterr()
    video = tmp_path / "eval.mp4"
    assert main(["eval", str(tmp_path / "run"), "--episodes", "6", "--video", str(video)]) == 0
    import json
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "PushCube" and report["episodes"] == 6.0
    assert 0.0 <= report["success_rate"] <= 1.0
    import av
    with av.open(str(video)) as c:
        assert c.streams.video[0].frames > 5


def test_sampling_evaluation_repeats_and_leaves_the_callers_stream():
    """evaluate(deterministic=False) samples from a generator seeded by the seeds, forked: the
    same policy and seeds give the same episodes, other seeds other draws, and the caller's
    torch stream goes on as if no evaluation had run. train.eval_deterministic=false uses it."""
    from embodied.eval.evaluate import evaluate
    from policies.mlp import MLPActorCritic, MLPConfig
    from sims.registry import make_env

    torch.manual_seed(0)
    env = make_env("Reach", 4, obs_mode="state")
    policy = MLPActorCritic(MLPConfig(obs_dim=env.spec.state_dim, action_dim=env.spec.action_dim, obs_key="state",
                                      init_log_std=0.0))
    torch.manual_seed(123)
    no_eval = torch.rand(3)
    torch.manual_seed(123)
    a = evaluate(policy, env, [5, 6, 7, 8], deterministic=False)
    assert torch.equal(torch.rand(3), no_eval)  # the caller's stream: untouched
    torch.manual_seed(7)
    b = evaluate(policy, env, [5, 6, 7, 8], deterministic=False)
    assert (a.episode_return, a.lengths) == (b.episode_return, b.lengths)
    c = evaluate(policy, env, [9, 6, 7, 8], deterministic=False)
    d = evaluate(policy, env, [5, 6, 7, 8], deterministic=True)
    env.close()
    assert c.episode_return != a.episode_return and d.episode_return != a.episode_return
    assert load_config(None, ["train.eval_deterministic=false"]).train.eval_deterministic is False


def test_eval_takes_an_sft_policy_directory(tmp_path, capsys):
    """`embodied sft`'s final (or its run directory) evaluates on the env its record names (task,
    cameras, image size); without a recorded task the one line asks for env.task=."""
    import json

    from policies.vla.config import FlowVLAConfig, make_config
    from policies.vla.flow import FlowVLA

    p = FlowVLA(make_config(FlowVLAConfig, "tiny", chunk_size=2, cameras=["wrist"], state_dim=9, action_dim=4))
    p.record = {"task": "Reach", "obs_mode": "rgb", "obs_keys": ["state", "rgb_wrist"], "action_dim": 4}
    p.save_pretrained(tmp_path / "sft" / "final")
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "sft"), "--episodes", "2", "env.max_episode_steps=3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["task"] == "Reach" and report["episodes"] == 2.0 and report["episode_length"] == 3.0
    assert report["checkpoint"] == str(tmp_path / "sft" / "final")

    p.record = {}
    p.save_pretrained(tmp_path / "bare")
    assert main(["eval", str(tmp_path / "bare"), "--episodes", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "records no task" in err and "env.task=" in err and len(err.splitlines()) == 1, err
    assert main(["eval", str(tmp_path / "bare"), "--episodes", "2", "env.task=Reach", "env.max_episode_steps=3"]) == 0
    assert json.loads(capsys.readouterr().out)["task"] == "Reach"


def test_a_benchmark_holds_its_tasks():
    """check_fits: a policy of MT10 (or a LIBERO suite) fits one of its tasks in its layout, and back;
    another benchmark or task does not."""
    from policies.base import same_task

    assert same_task("metaworld:MT10@goal", "metaworld:MT10/push-v3@goal")
    assert same_task("metaworld:MT10/push-v3", "metaworld:MT10")
    assert same_task("libero:libero_spatial", "libero:libero_spatial/0")
    assert not same_task("metaworld:MT10", "metaworld:MT50/push-v3")
    assert not same_task("metaworld:MT10/push-v3", "metaworld:MT10/reach-v3")
    assert not same_task("metaworld:MT1", "metaworld:MT10/push-v3")
    assert not same_task("Reach", "PushCube")


def test_fresh_train_into_a_used_run_dir_is_refused(tmp_path, capsys):
    """A second `train` into a directory holding a run ends in one line (exit 2) naming --resume and
    --overwrite, and touches nothing; --overwrite replaces the old run instead of mixing the two."""
    run = tmp_path / "run"
    args = ["train", *TINY, "train.total_steps=256", "train.save_every=1", f"train.run_dir={run}"]
    assert main(args) == 0
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "already holds a run" in err and "--resume" in err and "--overwrite" in err and err.count("\n") == 1
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
    (run / "checkpoints" / "iter_000099").mkdir()  # a stale checkpoint of the old run
    assert main(args + ["--overwrite"]) == 0
    assert not (run / "checkpoints" / "iter_000099").exists()


def test_a_resumed_run_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, "train.total_steps=256", "train.save_every=1", f"train.run_dir={run}"]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "train.total_steps=512"]) == 0
    out = capsys.readouterr().out
    assert "resumed from " in out and "at 256 env steps" in out and f"resumed:     {run}" in out
    assert "success rate before training" not in out
