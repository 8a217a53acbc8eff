"""`embodied train` through roles (train.backend / train.placement): one-line errors before
anything starts, an exact resume after kill -9, and the flow VLA through the roles."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.cli import main
from embodied.config import load_config
from embodied.distributed.loop import free_port, train_roles
from embodied.distributed.placement import preset
from embodied.rl.train import train

ROOT = Path(__file__).resolve().parents[2]
TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1", "train.eval_every=0", "train.eval_episodes=4",
        "train.video_episodes=0", "train.progress=false"]
TINY_VISION = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
               "image_size": 32, "patch_size": 16}


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run_dir / "checkpoints" / latest / "policy" / "model.safetensors"))


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("overrides, needle", [
    (["train.backend=spark"], "train.backend: 'spark' is not allowed; choose one of local, ray"),
    (["train.placement=hybrid"], "train.placement.preset: unknown preset 'hybrid'; allowed: collocated"),
    (["train.placement=3"], "train.placement: expected str or mapping, got 3"),
    (["train.placement={env: {count: 2, num_cpus: 1000}}"], "placement: asks for 2001 CPUs"),
    (["train.placement={rollout: {num_gpus: 1000}}"], "placement: asks for 1000 GPUs"),
    (["train.placement={learner: {count: 2}}"], "train.placement.learner.count: 2 with backend local"),
    (["train.placement={address: auto}"], "train.placement.address: 'auto' joins a Ray cluster"),
    (["train.backend=ray", "train.placement={address: 'ADDR'}"], "placement.address: cannot reach the Ray head"),
    (["train.backend=local", "train.max_staleness=-1"], "train.max_staleness: -1; allowed: an integer >= 0"),
    (["train.max_staleness=1"], "train.max_staleness: 1 runs over roles; set train.backend or train.placement"),
])
def test_bad_roles_config_is_one_line_before_anything_starts(tmp_path, capsys, overrides, needle):
    if "train.backend=ray" in overrides:
        pytest.importorskip("ray")
    overrides = [o.replace("ADDR", f"127.0.0.1:{free_port()}") for o in overrides]
    code = main(["train", *TINY, *overrides, f"train.run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "run").exists()  # nothing written


def test_default_config_keeps_the_single_process_loop(tmp_path):
    """Without train.backend / train.placement, `embodied train` is train.py's loop: nothing of
    embodied/distributed and no Ray is imported."""
    script = ("import sys; from embodied.cli import main; main(sys.argv[1:]); "
              "print(sorted(m for m in sys.modules if m.startswith(('embodied.distributed', 'ray'))))")
    out = subprocess.run([sys.executable, "-c", script, "train", *TINY, "train.total_steps=64",
                          f"train.run_dir={tmp_path / 'run'}"], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "backend" not in out.stdout


def test_killed_roles_run_resumes_exactly(tmp_path):
    """A pipelined run over roles (backend local) killed with SIGKILL and resumed with
    `embodied train --resume` ends with the weights of an uninterrupted run."""
    steps = ["train.placement=pipelined", "train.total_steps=2560", "train.save_every=1"]  # 40 iterations of 64
    train(load_config(None, TINY + steps + [f"train.run_dir={tmp_path / 'full'}"]))

    run = tmp_path / "killed"
    cmd = [sys.executable, "-m", "embodied.cli", "train", *TINY, *steps, f"train.run_dir={run}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    latest = run / "checkpoints" / "latest"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if latest.exists() and int(latest.read_text().strip().split("_")[1]) >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = int(latest.read_text().strip().split("_")[1])
    assert 3 <= killed_at < 40, f"kill landed at iteration {killed_at}"

    assert main(["train", "--resume", str(run), "train.progress=false"]) == 0
    assert_same_weights(final_weights(tmp_path / "full"), final_weights(run))


def test_grpo_through_roles_resumes_exactly(tmp_path):
    """`embodied train` with train.algorithm=grpo over 2 env workers in 2 stages (pipelined), one
    version stale: a run stopped at its checkpoint and resumed ends with the weights of a whole run."""
    args = ["train", *TINY, "env.task=ReachPoint", "train.algorithm=grpo", "grpo.group_size=4", "grpo.reward=return",
            "grpo.filter_groups=false", "train.backend=local", "train.placement=pipelined", "train.max_staleness=1",
            "train.save_every=2"]
    assert main([*args, "train.total_steps=384", f"train.run_dir={tmp_path / 'full'}"]) == 0  # 4 x 8 x 12 steps
    assert main([*args, "train.total_steps=192", f"train.run_dir={tmp_path / 'cut'}"]) == 0
    assert main(["train", "--resume", str(tmp_path / "cut"), "train.total_steps=384"]) == 0
    assert (tmp_path / "cut" / "checkpoints" / "latest").read_text().strip() == "iter_000004"
    assert_same_weights(final_weights(tmp_path / "full"), final_weights(tmp_path / "cut"))


def test_two_versions_stale_run_resumes_exactly(tmp_path):
    """`embodied train` with train.max_staleness=2 collects up to two batches ahead (staleness 0,
    1, 2 logged) and drains at its checkpoint (iteration 3), so a run stopped there and resumed
    ends with the weights of a whole run."""
    args = ["train", *TINY, "train.backend=local", "train.max_staleness=2", "train.save_every=3"]
    assert main([*args, "train.total_steps=384", f"train.run_dir={tmp_path / 'full'}"]) == 0  # 6 x 64 steps
    assert main([*args, "train.total_steps=192", f"train.run_dir={tmp_path / 'cut'}"]) == 0
    assert main(["train", "--resume", str(tmp_path / "cut"), "train.total_steps=384"]) == 0
    assert_same_weights(final_weights(tmp_path / "full"), final_weights(tmp_path / "cut"))
    events = EventAccumulator(str(tmp_path / "full" / "tb"))
    events.Reload()
    assert [e.value for e in events.Scalars("time/staleness")] == [0, 1, 2, 0, 1, 2]


def tiny_flow_vla(path: Path) -> list[str]:
    """Save a tiny Flow-Noise VLA at `path`; -> overrides that train it on Reach with two cameras
    and a privileged critic: configs/rl/rl_reach_flow_noise.yaml's settings, tiny sizes."""
    from policies.vla.config import FlowVLAConfig
    from policies.vla.flow import FlowVLA

    torch.manual_seed(0)
    FlowVLA(FlowVLAConfig(vision=dict(TINY_VISION), num_steps=2)).save_pretrained(path)
    return ["env.task=Reach", "env.num_envs=4", "env.obs_mode=rgb", "env.image_size=32", "env.cameras=[front,wrist]",
            "policy.name=flow_vla", f"policy.init_from={path}", "policy.noise_method=flow_noise",
            "policy.noise_std_min=0.08", "policy.noise_std_max=0.16", "policy.critic_obs=privileged",
            "ppo.rollout_steps=4", "ppo.epochs=1", "ppo.minibatches=2", "ppo.logprob_level=token",
            "ppo.critic_warmup_iters=1", "train.torch_threads=1"]


def test_flow_vla_through_roles(tmp_path):
    """The flow VLA trains over roles: pipelined (2 stages on threads; each env worker renders
    on its own thread) and through `embodied train`, whose checkpoint holds the VLA."""
    vla = tiny_flow_vla(tmp_path / "vla")
    cfg = load_config(None, vla)
    out = train_roles(cfg, preset("pipelined", 2), "local", iterations=2)
    assert out["version"] == 2 and [h["env_steps"] for h in out["history"]] == [64, 64]  # 4 x 4 chunks of 4
    assert out["history"][0]["critic_warmup"] == 1.0 and out["history"][1]["critic_warmup"] == 0.0
    summary = train(load_config(None, vla + [
        "train.backend=local", "train.total_steps=128", "train.eval_every=0", "train.eval_episodes=2",
        "train.video_episodes=0", "train.progress=false", f"train.run_dir={tmp_path / 'run'}"]))
    assert summary["iterations"] == 2 and summary["backend"] == "local"
    saved = final_weights(tmp_path / "run")
    assert set(out["weights"]) >= set(saved) and any(k.startswith("noise_head") for k in saved)
