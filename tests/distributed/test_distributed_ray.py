"""Roles as Ray actors on a local Ray (2 CPUs, no dashboard, torn down at the end): identical
weights to backend local (MLP and flow VLA, through train_roles and through `embodied train`),
an env worker killed with kill -9 mid-rollout is restarted, and so is a learner killed after a
checkpoint (the run rolls back to it and ends as an uninterrupted one)."""

import os
import signal
import time

import pytest
import torch

import embodied.rl.loop_parts
from embodied.cli import main
from embodied.config import load_config
from embodied.distributed.backend import make_backend
from embodied.distributed.hosts import heal
from embodied.distributed.sharded_rollout import RevivalError
from embodied.distributed.sharded_episodes import GroupedCollector
from embodied.distributed.loop import build_roles, train_roles
from embodied.distributed.placement import placement_from_dict, preset
from test_distributed_train import TINY as TINY_CLI
from test_distributed_train import assert_same_weights, final_weights, tiny_flow_vla

pytestmark = pytest.mark.ray
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # before Ray's import: Ray on 127.0.0.1 only
ray = pytest.importorskip("ray")

TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1"]


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


# `embodied train` one version stale, pipelined, a checkpoint every 2 iterations of 64 env steps
STALE_CLI = ["train", *TINY_CLI, "train.placement=pipelined", "train.save_every=2", "train.max_staleness=1",
             "ppo.recompute_log_probs=true"]


def learner_pids() -> set[int]:
    """The processes of this machine's Ray learner actors (Ray titles them ray::LearnerWorker...),
    in this process's network namespace (not those of tests/distributed/test_distributed_hosts.py's hosts)."""
    pids, here = set(), os.readlink("/proc/self/ns/net")
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if f.read().startswith(b"ray::LearnerWorker") and os.readlink(f"/proc/{name}/ns/net") == here:
                    pids.add(int(name))
        except OSError:  # the process ended meanwhile
            pass
    return pids


def kill_and_wait(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    while os.path.exists(f"/proc/{pid}") and "zombie" not in open(f"/proc/{pid}/status").read():
        time.sleep(0.01)


@pytest.mark.scale  # `make bench-scale`; the suite rebuilds a lost env worker in test_distributed_hosts' host cut
def test_killed_env_worker_is_restarted_and_its_episodes_dropped():
    """PPO's collector, then GRPO's over the same actors, each with an env worker killed with
    SIGKILL mid-rollout."""
    cfg = load_config(None, TINY + ["ppo.rollout_steps=16"])
    place = preset("collocated", 2)
    backend = make_backend("ray", place)
    try:
        collector, learners = build_roles(cfg, place, backend)
        collector.reset(seed=0)
        collector.set_weights(*backend.get(backend.call(learners[0], "weights")))
        pid = backend.get(backend.call(collector.workers[0], "where"))["pid"]
        collector.on_step = lambda t: kill_and_wait(pid) if t == 5 else None
        batch = collector.collect()
        collector.on_step = None
        assert collector.fault_stats() == {"env_worker_restarts": 1.0, "dropped_episodes": 4.0,
                                           "rollout_restarts": 0.0}
        assert batch.traj.num_envs == 4  # the killed shard's columns left this iteration
        assert batch.traj.actions.shape[:2] == (16, 4)
        assert backend.get(backend.call(collector.workers[0], "where"))["pid"] != pid
        stats = backend.get(backend.call(learners[0], "update", batch.traj))  # training goes on
        assert stats["samples"] == 16 * 4
        again = collector.collect()
        assert again.traj.num_envs == 8 and collector.restarts == 1
        # the rollout role killed mid-batch: rebuilt with the last weights, the batch collected
        # again from where the envs stand; no episode is dropped
        pid, killed = backend.get(backend.call(collector.rollout, "where"))["pid"], []
        collector.on_step = lambda t: (kill_and_wait(pid), killed.append(t)) if t == 5 and not killed else None
        batch = collector.collect()
        collector.on_step = None
        assert collector.fault_stats() == {"env_worker_restarts": 1.0, "dropped_episodes": 4.0,
                                           "rollout_restarts": 1.0}
        assert batch.traj.actions.shape[:2] == (16, 8) and batch.weight_version == again.weight_version
        assert backend.get(backend.call(collector.rollout, "where"))["pid"] != pid
        assert any("rollout role lost: rebuilt" in e for e in collector.pop_events())
        # GRPO's grouped collection over the same actors (one group of 4 envs on each worker):
        # a worker killed mid-episode takes its whole group out of the batch
        grouped = GroupedCollector(backend, collector.workers, collector.sizes, collector.rollout, 4,
                                   collector.make_worker)
        grouped.reset(seed=0)
        pid = backend.get(backend.call(grouped.workers[1], "where"))["pid"]
        grouped.on_step = lambda t: kill_and_wait(pid) if t == 5 else None
        batch = grouped.collect()
        assert grouped.fault_stats() == {"env_worker_restarts": 1.0, "dropped_episodes": 4.0,
                                         "rollout_restarts": 0.0}
        assert batch.traj.group_ids.tolist() == [0, 0, 0, 0] and batch.traj.episode_mask[:5].all()
        assert grouped.pop_episode_stats()["episodes"] == 4.0
        # its rollout role killed mid-collect: rebuilt, and the whole batch collected again
        grouped.make_rollout = collector.make_rollout
        grouped.set_weights(*backend.get(backend.call(learners[0], "weights")))
        pid, killed = backend.get(backend.call(grouped.rollout, "where"))["pid"], []
        grouped.on_step = lambda t: (kill_and_wait(pid), killed.append(t)) if t == 3 and not killed else None
        batch = grouped.collect()
        assert grouped.fault_stats() == {"env_worker_restarts": 1.0, "dropped_episodes": 4.0,
                                         "rollout_restarts": 1.0}
        assert batch.traj.group_ids.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        assert backend.get(backend.call(grouped.rollout, "where"))["pid"] != pid
        # between iterations GRPO's workers are health-checked as PPO's are (hosts.heal): a dead
        # one is rebuilt before the next collect, with nothing in progress to drop
        grouped.pop_events()
        kill_and_wait(backend.get(backend.call(grouped.workers[0], "where"))["pid"])
        assert heal(grouped) == 1 and grouped.fault_stats()["dropped_episodes"] == 4.0
        assert any(e.startswith("env worker 0 lost: rebuilt") for e in grouped.pop_events())
        assert grouped.collect().traj.group_ids.tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
        # a rebuilt worker that dies before answering (placed on a host about to be declared
        # dead) is built again; when every try dies, RevivalError ends the run
        build, deaths = grouped.make_worker, []

        def dying(i, node=None, always=False):
            w = build(i, node=node)
            if always or not deaths:
                deaths.append(i)
                kill_and_wait(backend.get(backend.call(w, "where"))["pid"])
            return w

        grouped.make_worker = dying
        kill_and_wait(backend.get(backend.call(grouped.workers[1], "where"))["pid"])
        assert heal(grouped) == 1 and deaths == [1]
        assert any("the rebuilt one died too" in e and "try 2 of 3" in e for e in grouped.pop_events())
        grouped.make_worker = lambda i, node=None: dying(i, node, always=True)
        kill_and_wait(backend.get(backend.call(grouped.workers[1], "where"))["pid"])
        with pytest.raises(RevivalError, match="env worker 1 could not be rebuilt: each of 3 new ones died"):
            heal(grouped)
        assert deaths == [1, 1, 1, 1]
    finally:
        backend.shutdown()


@pytest.mark.scale  # make bench-scale: the suite keeps gloo data parallelism locally (test_distributed_dp.py)
def test_two_ray_learners_equal_one_local_learner():
    """learner.count=2: two LearnerWorker actors in one gloo group, each on half the envs."""
    cfg = load_config(None, TINY + ["ppo.minibatches=1", "ppo.normalize_advantages=false"])
    one = train_roles(cfg, placement_from_dict({"env": {"count": 1}}), "local", iterations=2)
    two = train_roles(cfg, placement_from_dict({"env": {"count": 1}, "learner": {"count": 2}}), "ray", iterations=2)
    assert len({w["pid"] for w in two["where"]["learner"]}) == 2
    for k, v in one["weights"].items():
        torch.testing.assert_close(two["weights"][k], v, rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.scale  # make bench-scale: the suite keeps a stale schedule on Ray in test_embodied_train_on_ray_resumes_on_local_exactly
def test_stale_schedule_on_ray_equals_local():
    cfg = load_config(None, TINY)
    local = train_roles(cfg, preset("collocated", 1), "local", iterations=4, max_staleness=2)
    remote = train_roles(cfg, preset("collocated", 1), "ray", iterations=4, max_staleness=2)
    assert [h["staleness"] for h in remote["history"]] == [0, 1, 2, 2]
    for k, v in local["weights"].items():
        assert torch.equal(v, remote["weights"][k]), k
    # the last two updates finish back to back: the last one's learner time fell in the window before
    assert all(h["learner_busy_seconds"] > 0 for h in remote["history"][:-1])
    for h in remote["history"]:  # measured inside each actor; idle = the driver's wall - busy
        assert h["rollout_busy_seconds"] > 0, h
        for r in ("env", "rollout", "learner"):
            assert h[f"{r}_idle_seconds"] >= 0 and 0 <= h[f"{r}_cpu_seconds"] <= h[f"{r}_busy_seconds"] + 0.01, h


def test_embodied_train_on_ray_resumes_on_local_exactly(tmp_path, capsys, monkeypatch):
    """`embodied train ... train.backend=ray` on this machine's Ray, one version stale
    (train.max_staleness=1, log-probs recomputed), its learner actor killed with SIGKILL at the
    end of iteration 3: the next update finds it dead, the driver rebuilds it, rolls every role
    back to the checkpoint of iteration 2 and runs 3 and 4 again, so the run ends with the weights
    of a whole local run and logs one restart. Resumed from that checkpoint with
    train.backend=local, it ends with them too (the roles' checkpoint does not depend on the
    backend, and both run the same schedule). A checkpoint every 2 iterations drains the
    overlap, so batches are 0 and 1 versions stale in turn; each role's busy time, measured
    inside it, goes to TensorBoard with idle = wall - busy >= 0."""
    end_iteration, old, killed = embodied.rl.loop_parts.end_iteration, learner_pids(), []

    def end_and_kill(cfg, it, *args):
        out = end_iteration(cfg, it, *args)
        if it == 3 and not killed:
            killed.extend(learner_pids() - old)
            assert len(killed) == 1
            kill_and_wait(killed[0])
        return out

    monkeypatch.setattr(embodied.rl.loop_parts, "end_iteration", end_and_kill)
    run = tmp_path / "ray"
    assert main([*STALE_CLI, "train.total_steps=256", "train.backend=ray", f"train.run_dir={run}"]) == 0
    monkeypatch.undo()
    out = capsys.readouterr().out
    assert "backend ray" in out and killed, out
    assert out.count("learner died at iteration 4") == 1 and "rolled back to iter_000002 (step 128)" in out, out
    local = tmp_path / "local"
    assert main([*STALE_CLI, "train.total_steps=256", "train.backend=local", f"train.run_dir={local}"]) == 0
    whole = final_weights(local)
    assert_same_weights(whole, final_weights(run))
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tb"))
    events.Reload()
    for tag in ("train/approx_kl", "rollout/env_worker_restarts", "time/env_wait_seconds", "eval/success_rate"):
        assert [e.step for e in events.Scalars(tag)][-1] == 256, tag  # 8 envs x 8 steps x 4 iterations
    scalars = {tag: [e.value for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    # iterations 3 and 4 as the restarted learner ran them; the first try at 3 was purged
    assert scalars["rollout/learner_restarts"] == [0, 0, 1, 1]
    assert scalars["time/staleness"] == [0, 1, 0, 1] and scalars["time/weight_version"] == [0, 0, 2, 2]
    for role in ("env", "rollout", "learner"):
        assert sum(scalars[f"time/{role}_busy_seconds"]) > 0 and min(scalars[f"time/{role}_idle_seconds"]) >= 0
    branch = tmp_path / "branch"  # an older checkpoint continues in a new run, never over the newer ones
    assert main(["train", "--resume", str(run / "checkpoints" / "iter_000002"), "train.backend=local",
                 f"train.run_dir={branch}"]) == 0
    assert_same_weights(whole, final_weights(branch))


def test_bad_learner_restarts_is_one_line(tmp_path, capsys):
    assert main(["train", *TINY_CLI, "train.backend=ray", "train.learner_restarts=-1",
                 f"train.run_dir={tmp_path / 'run'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("embodied train: error: train.learner_restarts: -1; allowed: an integer >= 0 "
                   "(0: a dead learner ends the run)")


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_flow_vla_on_ray_equals_local(tmp_path):
    """Synchronous roles (two pipeline stages, two env workers): backend local runs every role
    in this process, backend ray in actors, and both end with identical weights."""
    cfg = load_config(None, tiny_flow_vla(tmp_path / "vla"))
    local = train_roles(cfg, preset("pipelined", 2), "local", iterations=2)
    remote = train_roles(cfg, preset("pipelined", 2), "ray", iterations=2)
    assert remote["version"] == local["version"] == 2
    assert {w["pid"] for w in local["where"]["env"]} == {os.getpid()}
    assert os.getpid() not in {w["pid"] for w in remote["where"]["env"]}
    assert len({w["pid"] for w in remote["where"]["env"]}) == 2
    for k, v in local["weights"].items():
        assert torch.equal(v, remote["weights"][k]), k
    assert local["history"][0]["approx_kl"] == remote["history"][0]["approx_kl"]


@pytest.mark.scale  # make bench-scale, for the suite's 15 minutes (docs/results/suite.md)
def test_sigterm_in_train_on_ray_checkpoints_and_the_line_resumes(tmp_path):
    """`embodied train ... train.backend=ray` (a driver process attached to this machine's Ray)
    ended by SIGTERM, as the local trainer's is in tests/run/test_lost_work.py: exit 143, the
    iteration it was in is checkpointed, and the last line's command continues the run."""
    import shlex

    from cli_run import signal_when_ready

    run = tmp_path / "run"
    address = ray.get_runtime_context().gcs_address
    argv = ["train", *TINY_CLI, "train.backend=ray", "train.total_steps=1000000", "train.save_every=1000",
            f"train.placement={{preset: disaggregated, address: '{address}'}}", f"train.run_dir={run}"]
    code, err = signal_when_ready(argv, lambda: (run / "tb").is_dir() and any((run / "tb").iterdir()),
                                  signal.SIGTERM, tmp_path / "stderr.txt")
    last = err.strip().splitlines()[-1]
    assert code == 143 and "stopped by SIGTERM; kept " in last and "Traceback" not in err, err[-3000:]
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert f"checkpoints/{latest}" in last and int(latest.split("_")[1]) >= 1, last
    resume = shlex.split(last.split("; continue with: ", 1)[1])  # PROGRAM... train --resume RUN
    resume = resume[resume.index("train"):]
    assert resume == ["train", "--resume", str(run)], last
    it = int(latest.split("_")[1])
    assert main([*resume, f"train.total_steps={(it + 1) * 64}"]) == 0  # 8 envs x 8 steps an iteration
    assert (run / "checkpoints" / "latest").read_text().strip() == f"iter_{it + 1:06d}"


def test_a_role_that_cannot_be_rebuilt_ends_the_run_in_one_line(tmp_path):
    """What the Ray trainer raises when RevivalError reaches it: one line (a CheckpointError,
    so the CLI prints it and exits 2) with the last checkpoint and the command that resumes."""
    from embodied.distributed.trainer import roles_lost
    from embodied.run.checkpoint import CheckpointError

    lost = RevivalError("env worker 1 could not be rebuilt: each of 3 new ones died before answering")
    e = roles_lost(lost, tmp_path / "checkpoints" / "iter_000004", tmp_path)
    assert isinstance(e, CheckpointError) and "\n" not in str(e)
    assert str(e).startswith(str(lost)) and "(last checkpoint iter_000004)" in str(e)
    assert str(e).endswith(f" train --resume {tmp_path}")
    assert "nothing to resume from" in str(roles_lost(lost, None, tmp_path))
