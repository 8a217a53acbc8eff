"""Every command with corrupted inputs (issue 37): truncated or garbled checkpoints, policies,
world models and configs; checkpoints, datasets and envs of the wrong task or modality; bad
options of the robot-side commands and the pipeline; signals mid-run. Each case runs as a user
runs it, `python -m embodied.cli ...` in a process of its own, started in an empty working
directory with an empty HOME: it must end in one line on stderr and exit 2 (130 / 143 for a
signal), and write nothing outside the run it names (a failed command leaves no new directory
at all, the working directory and HOME stay empty)."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from cli_run import CLI, ROOT, cli_env, signal_when_ready

from embodied.cli import main


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in root.rglob("*")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Good inputs the cases corrupt: a Reach state-PPO run, a Reach flow-VLA SFT, a Reach rgb
    dataset and a state one, a PushCube rgb dataset, a PushCube state world model."""
    d = tmp_path_factory.mktemp("inputs")
    assert main(["train", "configs/ppo/ppo_reach.yaml", "env.num_envs=8", "ppo.rollout_steps=16", "train.eval_episodes=2",
                 "train.save_every=1", "train.progress=false", "train.video_episodes=0", "train.total_steps=256",
                 f"train.run_dir={d / 'ppo'}"]) == 0
    for task, name, extra in (("Reach", "reach_rgb", ["--obs-mode", "rgb", "--cameras", "front,wrist"]),
                              ("PushCube", "push_rgb", ["--obs-mode", "rgb", "--cameras", "front,wrist"]),
                              ("Reach", "reach_state", []), ("PushCube", "push_state", ["--noise", "0.3"])):
        assert main(["collect", task, "--episodes", "3" if task == "Reach" else "6", "--out", str(d / name),
                     *extra]) == 0
    assert main(["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={d / 'reach_rgb'}", f"run_dir={d / 'sft'}",
                 "steps=2", "batch_size=8", "eval_every=0", "eval_episodes=0", "progress=false"]) == 0
    assert main(["world-model", "train", "world_model/pushcube", f"dataset={d / 'push_state'}", "epochs=1",
                 "hidden=16", "latent=8", "--out", str(d / "wm")]) == 0
    return d


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _truncate(f: Path) -> None:
    f.write_bytes(f.read_bytes()[: max(len(f.read_bytes()) // 3, 8)])


def _garble(f: Path) -> None:
    f.write_text("{not json")


def _ckpt(run: Path) -> Path:
    return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()


# (id, prepare(inputs, work) -> argv, the words the one line must hold)
CASES = [
    ("eval/policy-truncated", lambda i, w: (_truncate(_ckpt(_copy(i / "ppo", w / "r")) / "policy" / "model.safetensors"),
                                            ["eval", str(w / "r"), "--episodes", "1"])[1], ["model.safetensors"]),
    ("eval/trainer-truncated", lambda i, w: (_truncate(_ckpt(_copy(i / "ppo", w / "r")) / "trainer.safetensors"),
                                             ["eval", str(w / "r"), "--episodes", "1"])[1], ["trainer.safetensors"]),
    ("eval/meta-garbled", lambda i, w: (_garble(_ckpt(_copy(i / "ppo", w / "r")) / "meta.json"),
                                        ["eval", str(w / "r"), "--episodes", "1"])[1], ["meta.json"]),
    ("eval/policy-config-garbled", lambda i, w: (_garble(_ckpt(_copy(i / "ppo", w / "r")) / "policy" / "config.json"),
                                                 ["eval", str(w / "r"), "--episodes", "1"])[1], ["config.json"]),
    ("eval/wrong-task", lambda i, w: ["eval", str(i / "ppo"), "env.task=PushCube", "--episodes", "1"],
     ["'Reach'", "'PushCube'"]),
    ("serve/policy-truncated", lambda i, w: (_truncate(_ckpt(_copy(i / "ppo", w / "r")) / "policy" / "model.safetensors"),
                                             ["serve", str(w / "r"), "--episodes", "1"])[1], ["model.safetensors"]),
    ("sim2real/policy-truncated", lambda i, w: (
        _truncate(_ckpt(_copy(i / "ppo", w / "r")) / "policy" / "model.safetensors"),
        ["sim2real", str(w / "r"), "--task", "Reach", "--trials", "1", "--out", str(w / "rep")])[1], ["model.safetensors"]),
    ("sim2real/wrong-task", lambda i, w: ["sim2real", str(i / "ppo"), "--task", "PushCube", "--trials", "1",
                                          "--out", str(w / "rep")], ["--task"]),
    ("train/resume-only-checkpoint-truncated", lambda i, w: (
        [_truncate(c / "trainer.safetensors") for c in (_copy(i / "ppo", w / "r") / "checkpoints").glob("iter_*")],
        ["train", "--resume", str(w / "r"), "train.total_steps=512"])[1], ["no readable checkpoint"]),
    ("train/resume-other-task", lambda i, w: ["train", "--resume", str(i / "ppo"), "env.task=PushCube"],
     ["env.task", "allowed: Reach"]),
    ("train/init-from-truncated", lambda i, w: (
        _truncate(_copy(i / "sft", w / "s") / "final" / "model.safetensors"),
        ["train", "configs/rl/rl_reach_flow_noise.yaml", f"policy.init_from={w / 's' / 'final'}", "env.num_envs=2",
         f"train.run_dir={w / 'rl'}"])[1], ["model.safetensors"]),
    ("train/init-from-other-task", lambda i, w: [
        "train", "configs/rl/rl_pushcube_flow_noise.yaml", f"policy.init_from={i / 'sft' / 'final'}", "env.num_envs=2",
        f"train.run_dir={w / 'rl'}"], ["trained on task 'Reach'", "'PushCube'"]),
    ("train/world-model-truncated", lambda i, w: (
        _truncate(_copy(i / "wm", w / "wm") / "model.safetensors"),
        ["train", "configs/ppo/quickstart.yaml", f"env.task=wm:{w / 'wm'}", "env.allow_failed_model=true",
         "env.num_envs=2", f"train.run_dir={w / 'rl'}"])[1], ["model.safetensors"]),
    ("sft/state-only-dataset", lambda i, w: ["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={i / 'reach_state'}",
                                             f"run_dir={w / 'sft'}"], ["cameras", "state-only"]),
    ("sft/other-task-dataset", lambda i, w: ["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={i / 'push_rgb'}",
                                             f"run_dir={w / 'sft'}"], ["PushCube", "task="]),
    ("sft/init-from-other-task", lambda i, w: [
        "sft", "configs/sft/sft_reach_flow.yaml", f"dataset={i / 'push_rgb'}", "task=PushCube",
        f"init_from={i / 'sft' / 'final'}", f"run_dir={w / 'sft'}"], ["init_from", "'Reach'"]),
    ("sft/init-from-truncated", lambda i, w: (
        _truncate(_copy(i / "sft", w / "s") / "final" / "model.safetensors"),
        ["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={i / 'reach_rgb'}", f"init_from={w / 's' / 'final'}",
         f"run_dir={w / 'sft'}"])[1], ["model.safetensors"]),
    ("sft/device-absent", lambda i, w: ["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={i / 'reach_rgb'}",
                                        "device=cuda:7", f"run_dir={w / 'sft'}"], ["device"]),
    ("collect/policy-other-task", lambda i, w: ["collect", "PushCube", "--policy", str(i / "ppo"), "--episodes", "1",
                                                "--out", str(w / "d")], ["'Reach'"]),
    ("collect/policy-truncated", lambda i, w: (
        _truncate(_ckpt(_copy(i / "ppo", w / "r")) / "policy" / "model.safetensors"),
        ["collect", "Reach", "--policy", str(w / "r"), "--episodes", "1", "--out", str(w / "d")])[1],
     ["model.safetensors"]),
    ("world-model-eval/truncated", lambda i, w: (_truncate(_copy(i / "wm", w / "wm") / "model.safetensors"),
                                                 ["world-model", "eval", str(w / "wm")])[1], ["model.safetensors"]),
    ("world-model-eval/config-garbled", lambda i, w: (_garble(_copy(i / "wm", w / "wm") / "config.json"),
                                                      ["world-model", "eval", str(w / "wm")])[1], ["config.json"]),
    ("world-model-eval/other-task-dataset", lambda i, w: ["world-model", "eval", str(i / "wm"), "--dataset",
                                                          str(i / "reach_state")], ["Reach"]),
    ("world-model-train/rgb-on-state-dataset", lambda i, w: [
        "world-model", "train", "world_model/pushcube", f"dataset={i / 'push_state'}", "cameras=[front]",
        "--out", str(w / "wm2")], ["front"]),
    ("report/results-garbled", lambda i, w: ((w / "rep").mkdir(), _garble(w / "rep" / "results.json"),
                                             ["report", str(w / "rep")])[2], ["results.json"]),
    ("finetune-robot/no-demos", lambda i, w: ["finetune-robot", "finetune_reach_sim", f"run_dir={w / 'ft'}",
                                              f"demos={w / 'none'}"], ["demos"]),
    ("robot-sim/unknown-task", lambda i, w: ["robot-sim", "Reech"], ["'Reech'", "allowed"]),
    ("robot-sim/rate-zero", lambda i, w: ["robot-sim", "Reach", "--rate", "0"], ["--rate"]),
    ("robot-operator/unknown-task", lambda i, w: ["robot-operator", "Reech"], ["'Reech'", "allowed"]),
    ("robot-operator/window-zero", lambda i, w: ["robot-operator", "Reach", "--window", "0"], ["--window", ">= 1"]),
    ("pipeline/config-garbled", lambda i, w: ((w / "p.yaml").write_text("{not yaml: ["), ["pipeline", str(w / "p.yaml")])[1],
     ["p.yaml", "YAML"]),
    ("pipeline/unknown-key", lambda i, w: ["pipeline", "demo", "rl.train.total_stepz=5"], ["total_stepz", "allowed"]),
]


def _as_user(argv: list[str]) -> list[str]:
    """The repository's config paths made absolute: the command runs in an empty directory."""
    return [str(ROOT / a) if a.startswith("configs/") else a for a in argv]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_corrupted_input_is_one_line_and_exit_2(inputs, tmp_path, case):
    name, prepare, words = case
    argv = _as_user(prepare(inputs, tmp_path))
    cwd, home = tmp_path / "cwd", tmp_path / "home"
    cwd.mkdir()
    home.mkdir()
    before, inputs_before = _tree(tmp_path), _tree(inputs)
    p = subprocess.run(CLI + argv, cwd=cwd, env={**cli_env(), "HOME": str(home)}, capture_output=True, text=True,
                       timeout=120)
    err = p.stderr.strip()
    assert p.returncode == 2, (name, p.returncode, err[-2000:])
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(rf"embodied {re.escape(argv[0])}: error: ", lines[0]), lines[0]
    for w in words:
        assert w in lines[0], (name, lines[0])
    assert _tree(tmp_path) == before, f"{name} wrote {set(_tree(tmp_path)) - set(before)}"
    assert _tree(inputs) == inputs_before


def _signal_mid_run(argv: list[str], ready, sig: int, tmp_path: Path) -> tuple[int, str]:
    """Run `embodied ARGV` (stdout to tmp_path/stdout.txt), send `sig` once ready(); (exit code, stderr)."""
    return signal_when_ready(argv, ready, sig, tmp_path / "stderr.txt", tmp_path / "stdout.txt")


def test_signal_mid_world_model_train_keeps_the_best_epoch(inputs, tmp_path):
    out = tmp_path / "wm"
    log = tmp_path / "stdout.txt"
    code, err = _signal_mid_run(["world-model", "train", "world_model/pushcube", f"dataset={inputs / 'push_state'}",
                                 "epochs=100000", "patience=100000", "hidden=16", "latent=8", "--out", str(out)],
                                lambda: log.is_file() and "epoch 1:" in log.read_text(), signal.SIGINT, tmp_path)
    last = err.strip().splitlines()[-1]
    assert code == 130 and "stopped by SIGINT; kept the model of its best epoch" in last, err[-2000:]
    assert f"init_from={out}" in last and (out / "model.safetensors").is_file() and (out / "report.json").is_file()
    assert set(p.name for p in tmp_path.iterdir()) == {"wm", "stderr.txt", "stdout.txt"}


def test_signal_mid_sim2real_keeps_the_finished_conditions(inputs, tmp_path):
    out = tmp_path / "rep"
    log = tmp_path / "stdout.txt"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("friction: [" + ", ".join(f"{0.5 + 0.05 * i:.2f}" for i in range(30)) + "]\n")
    code, err = _signal_mid_run(["sim2real", str(inputs / "ppo"), "--task", "Reach", "--trials", "4", "--num-envs",
                                 "4", "--sweep", str(sweep), "--no-videos", "--out", str(out)],
                                lambda: log.is_file() and "friction=0.5" in log.read_text(), signal.SIGTERM, tmp_path)
    last = err.strip().splitlines()[-1]
    assert code == 143 and "stopped by SIGTERM; kept " in last, err
    assert re.search(r"; continue with: \S+ -m embodied(\.cli)? sim2real ", last), last
    results = json.loads((out / "results.json").read_text())
    assert 8 <= len(results["episodes"]) < 4 * 31 and (out / "report.md").read_text().startswith("# Sim-to-real")


def test_signal_mid_finetune_robot_keeps_the_episodes(inputs, tmp_path):
    run = tmp_path / "ft"
    progress = run / "progress.jsonl"
    code, err = _signal_mid_run(["finetune-robot", "finetune_reach_sim", f"run_dir={run}",
                                 f"demos={inputs / 'reach_state'}", "init.bc_episodes=3", "init.bc_steps=20",
                                 "actor.episodes=100000", "actor.eval_every=0", "learner.checkpoint_every_s=1"],
                                lambda: progress.is_file() and '"kind": "episode"' in progress.read_text(),
                                signal.SIGINT, tmp_path)
    last = err.strip().splitlines()[-1]
    assert code == 130 and "stopped by SIGINT; kept " in last and "episodes and policy version" in last, err[-3000:]
    assert re.search(r"; continue with: \S+ -m embodied(\.cli)? finetune-robot finetune_reach_sim", last), last
    rows = [json.loads(x) for x in progress.read_text().splitlines()]
    kept = int(last.split("kept ", 1)[1].split(" ", 1)[0])
    assert kept == sum(r["kind"] == "episode" for r in rows) >= 1
