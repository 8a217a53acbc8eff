"""The README's journeys chain (issue 37): every `.venv/bin/embodied` command of README.md's
"One command per journey" table runs, in the table's order, in a fresh directory (configs/
linked in, nothing else), each on what the rows above it produced, at small sizes (the size
options below; the paths and the rest of each command exactly as the README has them).
The ROS 2 rows run their processes over DDS on loopback."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from embodied.cli import main

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "embodied.cli"]

# The size options each README command runs with here: option values replaced, key=value overrides added.
SMALL_TRAIN = ["env.num_envs=4", "ppo.rollout_steps=8", "train.eval_episodes=2", "train.eval_every=1",
               "train.save_every=2", "train.progress=false", "train.video_episodes=1"]
SMALL = {
    "train configs/ppo/quickstart.yaml": ({}, [*SMALL_TRAIN, "train.total_steps=64"]),
    "collect Reach": ({"--episodes": lambda n: str(min(int(n), 4))}, []),
    "sft configs/sft/sft_reach_flow.yaml": ({}, ["steps=2", "batch_size=8", "eval_every=0", "eval_episodes=2",
                                             "eval_envs=2", "progress=false"]),
    "train configs/rl/rl_reach_flow_noise.yaml": ({}, ["env.num_envs=2", "ppo.rollout_steps=2", "train.total_steps=8",
                                                    "train.eval_episodes=2", "train.eval_every=1",
                                                    "train.progress=false", "train.video_episodes=0"]),
    "train --resume": ({}, ["train.total_steps=96"]),
    "eval runs/quickstart": ({"--episodes": "2"}, []),
    "serve runs/quickstart": ({}, ["--episodes", "1"]),
    "sim2real runs/quickstart": ({}, ["--trials", "2", "--num-envs", "2", "--no-videos"]),
    "sim2real runs/sft_reach_flow": ({}, ["--trials", "2", "--num-envs", "2", "--no-videos"]),
    "finetune-robot finetune_reach": ({}, ["actor.episodes=2", "actor.eval_every=0", "init.bc_steps=20",
                                           "learner.warmup_transitions=20", "learner.critic_warmup_updates=5"]),
}
# A journey of its own, not a link of the chain: `make demo` runs collect -> SFT -> RL -> eval in one command
# (its stages are the chain's commands; its paths are checked by tests/test_vla_rl.py).
STANDALONE = ("pipeline",)
SERVERS = ("robot-sim", "robot-operator")  # they serve until stopped: started in the background


def journeys() -> list[tuple[str, list[list[str]]]]:
    """(what, [argv of each `.venv/bin/embodied` command]) of every row of the README's table, in order."""
    text = (ROOT / "README.md").read_text()
    table = text.split("## One command per journey", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or cells[0] in ("I want to", "---"):
            continue
        cmds = [shlex.split(c)[1:] for c in re.findall(r"`(\.venv/bin/embodied [^`]*)`", cells[1])]
        rows.append((cells[0], cmds))
    return rows


def small(argv: list[str]) -> list[str]:
    key = next((k for k in SMALL if argv[:len(k.split())] == k.split()), None)
    assert key is not None, f"no small size for the README's `embodied {' '.join(argv)}`: add it to SMALL"
    options, extra = SMALL[key]
    argv = list(argv)
    for opt, value in options.items():
        i = argv.index(opt) + 1
        argv[i] = value(argv[i]) if callable(value) else value
    # an override the README gives (train.total_steps=...) is replaced by the small one
    keys = {e.split("=", 1)[0] for e in extra if "=" in e}
    return [a for a in argv if a.split("=", 1)[0] not in keys] + extra


def test_readme_rows_chain(tmp_path, monkeypatch, dds_env):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": "egl", "PYTHONPATH": str(ROOT)}
    ran, servers = [], []
    try:
        for what, cmds in journeys():
            for argv in cmds:
                if argv[0] in STANDALONE:
                    continue
                if argv[0] in SERVERS:
                    log = tmp_path / f"{argv[0]}.log"
                    with log.open("w") as out:
                        servers.append(subprocess.Popen(CLI + argv, cwd=tmp_path, env=env, stdout=out,
                                                        stderr=subprocess.STDOUT))
                    ready = f"{argv[0]}: {argv[1]}"  # its first line: "robot-sim: Reach on domain ..."
                    t0 = time.monotonic()
                    while ready not in log.read_text():
                        assert servers[-1].poll() is None, f"{argv} ended: {log.read_text()[-3000:]}"
                        assert time.monotonic() - t0 < 60, f"{argv} not up in 60 s: {log.read_text()[-3000:]}"
                        time.sleep(0.2)
                    continue
                argv = small(argv)
                if argv[0] in ("serve", "finetune-robot"):  # a separate process, as a user's second shell
                    res = subprocess.run(CLI + argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                                         timeout=240)
                    assert res.returncode == 0, (what, argv, res.stderr[-3000:])
                else:
                    assert main(argv) == 0, (what, argv)
                ran.append(argv[0])
            for p in servers:  # a row's servers end with the row
                p.send_signal(signal.SIGINT)
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:  # say what the server was doing: its threads' stacks
                    p.send_signal(signal.SIGUSR1)  # embodied/cli.py: faulthandler writes them to stderr
                    time.sleep(2)
                    log = tmp_path / f"{p.args[len(CLI)]}.log"
                    raise AssertionError(f"{p.args[len(CLI):]} still running 30 s after SIGINT; its log ends: "
                                         f"{log.read_text()[-6000:]!r}") from None
                text = (tmp_path / f"{p.args[len(CLI)]}.log").read_text()  # a clean end, nothing dropped aloud
                assert p.returncode == 0 and "Traceback" not in text and "error" not in text.lower(), \
                    (p.args[len(CLI):], p.returncode, text[-3000:])
                if p.args[len(CLI)] == "robot-operator":
                    assert re.search(r"robot-operator: \d+ takeovers\s*$", text), text[-3000:]
            servers = []
    finally:
        for p in servers:
            p.kill()
            p.wait()
    assert ran.count("train") == 3 and {"collect", "sft", "eval", "serve", "sim2real", "finetune-robot"} <= set(ran)
    # what the rows produced, where the next rows read it
    assert (tmp_path / "runs" / "sft_reach_flow" / "final" / "model.safetensors").is_file()
    assert (tmp_path / "runs" / "rl_reach_flow_noise" / "checkpoints" / "latest").is_file()
    assert (tmp_path / "reports" / "pushcube" / "report.html").is_file()
    assert (tmp_path / "runs" / "finetune_reach" / "progress.jsonl").is_file()


def test_readme_tensorboard_is_the_venvs():
    text = (ROOT / "README.md").read_text()
    assert "`tensorboard --logdir" not in text and "\ntensorboard --logdir" not in text
    assert ".venv/bin/tensorboard --logdir runs/" in text
    assert os.access(ROOT / ".venv" / "bin" / "tensorboard", os.X_OK)


def test_readme_collect_count_is_the_sft_configs():
    """The collect row records the demos its SFT config is measured with."""
    rows = dict((what, cmds) for what, cmds in journeys())
    collect = next(c for cmds in rows.values() for c in cmds if c[0] == "collect")
    sft = next(c for cmds in rows.values() for c in cmds if c[0] == "sft")
    config = (ROOT / sft[1]).read_text()
    assert f"--episodes {collect[collect.index('--episodes') + 1]} " in config
    assert f"dataset: {collect[collect.index('--out') + 1]}" in config
