"""Nothing a user does loses work (issue 37): `train --resume RUN_DIR` continues in RUN_DIR (a
copied run in place, an older checkpoint only into a new run, an unreadable latest skipped
aloud); SIGINT / SIGTERM in every long command end with what was kept, the command that
continues, and exit 130 / 143; what the end of a run needs is checked before its first step;
a failed command leaves no empty directory."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from cli_run import signal_when_ready

from embodied.cli import main
from sims.metaworld.proc import metaworld_python

ROOT = Path(__file__).resolve().parents[2]
TINY = ["env.num_envs=8", "ppo.rollout_steps=16", "train.eval_every=1", "train.eval_episodes=4",
        "train.save_every=2", "train.progress=false", "train.video_episodes=0"]


def _latest(run: Path) -> str:
    return (run / "checkpoints" / "latest").read_text().strip()


def _one_error_line(capsys, code: int, *words: str) -> str:
    """The command's stderr is one line, `embodied CMD: error: ...`, and it exits 2."""
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ": error: " in err, err
    for w in words:
        assert w in err, err
    return err


@pytest.fixture(scope="module")
def reach_run(tmp_path_factory):
    """A finished tiny Reach PPO run: 4 iterations, checkpoints at 2 and 4."""
    run = tmp_path_factory.mktemp("run") / "reach"
    assert main(["train", "configs/ppo/ppo_reach.yaml", *TINY, "train.total_steps=512", f"train.run_dir={run}"]) == 0
    assert _latest(run) == "iter_000004"
    return run


def test_resume_of_a_copied_run_writes_into_the_copy(reach_run, tmp_path):
    before = sorted(p.name for p in (reach_run / "checkpoints").iterdir())
    copy = tmp_path / "copy"
    shutil.copytree(reach_run, copy)
    assert main(["train", "--resume", str(copy), "train.total_steps=1024"]) == 0
    assert _latest(copy) == "iter_000008" and (copy / "checkpoints" / "iter_000006").is_dir()
    assert sorted(p.name for p in (reach_run / "checkpoints").iterdir()) == before  # the original untouched
    assert _latest(reach_run) == "iter_000004"
    meta = json.loads((copy / "checkpoints" / "iter_000008" / "meta.json").read_text())
    assert meta["config"]["train"]["run_dir"] == str(copy)
    assert meta["trained_on"]["task"] == "Reach" and meta["trained_on"]["obs_keys"] == ["privileged"]


def test_resume_of_an_older_checkpoint_never_moves_latest_back(reach_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(reach_run, copy)
    code = main(["train", "--resume", str(copy / "checkpoints" / "iter_000002"), "train.total_steps=1024"])
    _one_error_line(capsys, code, "iter_000002 is older than iter_000004", "train.run_dir=NEW_DIR")
    assert _latest(copy) == "iter_000004" and not (copy / "checkpoints" / "iter_000003").exists()
    branch = tmp_path / "branch"  # the same checkpoint, continued in a new run
    assert main(["train", "--resume", str(copy / "checkpoints" / "iter_000002"), "train.total_steps=512",
                 f"train.run_dir={branch}"]) == 0
    assert _latest(branch) == "iter_000004" and _latest(copy) == "iter_000004"


def test_resume_skips_an_unreadable_latest_aloud(reach_run, tmp_path, capsys):
    copy = tmp_path / "copy"
    shutil.copytree(reach_run, copy)
    f = copy / "checkpoints" / "iter_000004" / "trainer.safetensors"
    f.write_bytes(f.read_bytes()[:100])  # truncated, as by a full disk
    assert main(["train", "--resume", str(copy), "train.total_steps=768"]) == 0
    out = capsys.readouterr().out
    assert "iter_000004" in out and "continuing from iter_000002, the newest readable checkpoint" in out
    assert _latest(copy) == "iter_000006"


def test_eval_refuses_a_checkpoint_of_another_task(reach_run, capsys):
    code = main(["eval", str(reach_run), "env.task=PushCube", "--episodes", "2"])
    _one_error_line(capsys, code, "trained on task 'Reach', not 'PushCube'", "allowed: 'Reach'")


def _run_until(cmd: list[str], ready, sig: int, tmp_path: Path) -> tuple[int, str]:
    """Start `embodied CMD`, send `sig` once ready() holds, return (exit code, stderr)."""
    return signal_when_ready(cmd, ready, sig, tmp_path / f"stderr_{time.monotonic_ns()}.txt")


def _stopped_line(stderr: str, sig: int) -> tuple[str, list[str]]:
    """The last line: what was kept and the command that continues (as words)."""
    last = stderr.strip().splitlines()[-1]
    assert f"stopped by {signal.Signals(sig).name}; kept " in last, stderr[-2000:]
    assert "Traceback" not in stderr
    resume = last.split("; continue with: ", 1)[1]
    words = shlex.split(resume)  # the child ran as `python -m embodied.cli` in ROOT: so it continues
    assert (ROOT / words[0]).absolute() == Path(sys.executable).absolute(), words
    assert words[1:3] in (["-m", "embodied.cli"], ["-m", "embodied"]), words
    return last, words[3:]


def test_sigint_in_train_checkpoints_and_the_line_resumes(tmp_path):
    run = tmp_path / "run"
    cmd = ["train", "configs/ppo/ppo_reach.yaml", *TINY, "train.save_every=1000", "train.total_steps=1000000",
           f"train.run_dir={run}"]
    code, err = _run_until(cmd, lambda: (run / "tb").is_dir() and any((run / "tb").iterdir()), signal.SIGINT, tmp_path)
    assert code == 130
    last, resume = _stopped_line(err, signal.SIGINT)
    assert resume == ["train", "--resume", str(run)]
    name = _latest(run)  # the iteration the signal ended, though save_every never came
    assert f"checkpoints/{name}" in last and int(name.split("_")[1]) >= 1
    it = int(name.split("_")[1])
    assert main([*resume, f"train.total_steps={(it + 1) * 128}"]) == 0
    assert _latest(run) == f"iter_{it + 1:06d}"


def test_sigterm_in_collect_keeps_whole_episodes_and_continues(tmp_path):
    out = tmp_path / "demos"
    info = out / "meta" / "info.json"
    code, err = _run_until(["collect", "Reach", "--episodes", "100000", "--out", str(out), "--num-envs", "4"],
                           lambda: info.is_file() and json.loads(info.read_text())["total_episodes"] >= 8,
                           signal.SIGTERM, tmp_path)
    assert code == 143
    last, resume = _stopped_line(err, signal.SIGTERM)
    kept = json.loads(info.read_text())["total_episodes"]
    assert f"kept {kept} of 100000 episodes in {out}" in last
    seed = int(resume[resume.index("--seed") + 1])
    assert resume[resume.index("--episodes") + 1] == str(100000 - kept) and seed > kept
    resume[resume.index("--episodes") + 1] = "2"  # the same command, a little of it
    assert main(resume) == 0
    assert json.loads(info.read_text())["total_episodes"] == kept + 2


@pytest.mark.skipif(not metaworld_python().exists(), reason=".venv-metaworld is absent (make metaworld)")
def test_ctrl_c_to_the_process_group_leaves_the_workers_to_the_command(tmp_path):
    """A terminal's Ctrl-C reaches the MetaWorld workers as well as `embodied collect`: they
    ignore it, so the command finishes its step with them and ends with what it kept."""
    out = tmp_path / "demos"
    info = out / "meta" / "info.json"
    code, err = signal_when_ready(["collect", "metaworld:MT10", "--episodes", "1000", "--out", str(out)],
                                  lambda: info.is_file() and json.loads(info.read_text())["total_episodes"] >= 2,
                                  signal.SIGINT, tmp_path / "stderr.txt", group=True)
    assert code == 130, err[-2000:]
    last, resume = _stopped_line(err, signal.SIGINT)
    assert f"kept {json.loads(info.read_text())['total_episodes']} of 1000 episodes" in last and ": error: " not in err


@pytest.fixture(scope="module")
def reach_rgb(tmp_path_factory):
    out = tmp_path_factory.mktemp("data") / "reach_rgb"
    assert main(["collect", "Reach", "--episodes", "3", "--out", str(out), "--obs-mode", "rgb",
                 "--cameras", "front,wrist"]) == 0
    return out


def test_sigint_in_sft_keeps_the_state_and_resume_continues_it(reach_rgb, tmp_path, capsys):
    """SIGINT mid-SFT keeps the weights and the trainer state; `sft --resume RUN_DIR` continues the
    step count, the optimiser (Adam's step counts go on) and the TensorBoard log, and rewrites no
    step directory; a finished run and a config given with --resume are refused in one line."""
    import torch
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "sft"
    cmd = ["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={reach_rgb}", f"run_dir={run}", "steps=100000",
           "batch_size=8", "eval_every=0", "eval_episodes=0", "save_every=1"]  # step_0000001: the loop runs
    code, err = _run_until(cmd, lambda: (run / "step_0000001").is_dir(), signal.SIGINT, tmp_path)
    assert code == 130
    last, resume = _stopped_line(err, signal.SIGINT)
    assert resume == ["sft", "--resume", str(run)], last
    kept = sorted(run.glob("step_*"))
    stopped = kept[-1]
    n = int(stopped.name.split("_")[1])
    assert f"after step {n} of 100000 in {stopped}" in last and (stopped / "model.safetensors").is_file()
    before = {p.name: p.stat().st_mtime_ns for p in stopped.iterdir()}
    assert main([*resume, f"steps={n + 4}", "save_every=2", "progress=false"]) == 0
    assert f"resumed at step {n} of {n + 4}" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in stopped.iterdir()} == before  # never rewritten
    assert (run / "final" / "model.safetensors").is_file()
    later = sorted(p for p in run.glob("step_*") if p not in kept)
    assert [int(p.name.split("_")[1]) for p in later] == [k for k in range(n + 1, n + 4) if k % 2 == 0]
    state = torch.load(later[-1] / "trainer.pt", weights_only=True)
    adam_steps = {float(v["step"]) for v in state["optimizer"]["state"].values()}
    assert state["step"] == int(later[-1].name.split("_")[1]) and adam_steps == {float(state["step"])}
    events = EventAccumulator(str(run / "tb")).Reload()
    assert [e.step for e in events.Scalars("sft/loss")][-1] == n + 4  # the log goes on at the step count
    assert main(["sft", "--resume", str(run)]) == 2  # finished: its weights start a new run
    assert "init_from=" in capsys.readouterr().err
    assert main(["sft", "configs/sft/sft_reach_flow.yaml", "--resume", str(run)]) == 2
    assert "--resume" in capsys.readouterr().err


def test_sft_and_eval_give_one_number_for_the_same_weights(reach_rgb, tmp_path, capsys):
    """sft's own evaluation and `embodied eval` of its final weights run the same seeds (the
    evaluation seeds of train, eval and sim2real): the same successes, seed for seed."""
    run = tmp_path / "sft"
    assert main(["sft", "configs/sft/sft_reach_flow.yaml", f"dataset={reach_rgb}", f"run_dir={run}", "steps=30",
                 "batch_size=8", "eval_every=0", "eval_episodes=6", "save_every=0", "progress=false"]) == 0
    said = [x for x in capsys.readouterr().out.splitlines() if ": eval success " in x][-1]
    assert main(["eval", str(run / "final"), "--episodes", "6"]) == 0
    out = capsys.readouterr().out
    res = json.loads(out[out.index("{"):])
    assert said.endswith(f"eval success {res['success_rate']:.2f} over 6 episodes"), (said, res)
