"""Ray as users run it: a head and two worker hosts in network namespaces of this machine, each
started by our launch/ray_head.sh and launch/ray_worker.sh (tests/distributed/netns_cluster.py), and
`embodied train ... train.backend=ray train.placement.address=HEAD_IP:PORT` run by a driver on
the head. The env workers go to the hosts labelled role=env; the run's weights equal the local
run's; a worker host whose link is cut mid-run is replaced (its env worker rebuilt on the other
host, its episodes dropped and counted), and when it comes back an env worker moves back to it.
Every namespace, veth and process is removed afterwards. Root only (skipped otherwise)."""

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from embodied.config import load_config
from embodied.rl.train import train

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.ray
pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from netns_cluster import FAST_FAILURE, Host, NetnsCluster, usable  # noqa: E402

if why := usable():
    pytest.skip(why, allow_module_level=True)

TINY = ["env.task=PushCube", "env.num_envs=8", "ppo.rollout_steps=8", "ppo.minibatches=2", "ppo.epochs=1",
        "policy.hidden_sizes=[32,32]", "train.torch_threads=1", "train.eval_every=0", "train.eval_episodes=4",
        "train.video_episodes=0", "train.progress=false"]
# the longer runs: `make bench-cluster` (-m bench_cluster); `make test` deselects them
long_run = pytest.mark.bench_cluster
ENV_ON_WORKERS = "{preset: disaggregated, env: {count: 2, num_cpus: 0.5, labels: {role: env}}%s}"


@pytest.fixture(scope="module")
def cluster():
    c = NetnsCluster([Host("env0", 1, "role=env"), Host("env1", 1, "role=env")], env=FAST_FAILURE)
    with c:
        yield c
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert c.tag not in names  # torn down


def train_on_head(c: NetnsCluster, run_dir: Path, *overrides: str) -> subprocess.Popen:
    placement = ENV_ON_WORKERS % f", address: '{c.address}'"
    argv = [sys.executable, "-m", "embodied.cli", "train", *TINY, "train.backend=ray",
            f"train.placement={placement}", f"train.run_dir={run_dir}", *overrides]
    return c.popen("head", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})


def hosts_of(roles: str, role: str) -> list[str]:
    """The addresses in the run's "roles: env workers on A x2, B; rollout on ...; learner(s) on ..." line."""
    part = next(p for p in roles.removeprefix("roles: ").split("; ") if p.startswith(role))
    return [h.split(" x")[0] for h in part.split(" on ", 1)[1].split(", ")]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(str(run_dir / "checkpoints" / latest / "policy" / "model.safetensors"))


def scalars(run_dir: Path, tag: str) -> list[float]:
    acc = EventAccumulator(str(run_dir / "tb")).Reload()
    return [e.value for e in acc.Scalars(tag)]


@long_run  # 37 s; the suite's host cut checks the same placement (docs/results/suite.md)
def test_env_workers_on_the_worker_hosts_and_weights_equal_local(cluster, tmp_path):
    proc = train_on_head(cluster, tmp_path / "cluster", "train.total_steps=256")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    roles = next(line for line in out.splitlines() if line.startswith("roles:")).strip()
    assert sorted(hosts_of(roles, "env")) == sorted(cluster.ips.values()), roles  # one per worker host
    assert hosts_of(roles, "learner") == hosts_of(roles, "rollout") == [cluster.head_ip], roles
    local = tmp_path / "local"
    train(load_config(None, TINY + ["train.total_steps=256", "train.backend=local", f"train.run_dir={local}",
                                    f"train.placement={ENV_ON_WORKERS % ''}"]))
    a, b = final_weights(tmp_path / "cluster"), final_weights(local)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


class Output:
    """A driver's stdout, read line by line in a thread: `wait_for(text, timeout)` -> seconds
    until a line holds text (the driver still running), `text()` -> all of it so far."""

    def __init__(self, proc: subprocess.Popen):
        self.proc, self.lines = proc, []
        self.reader = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self.reader.start()

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> float:
        t = time.time()
        while not any(text in line for line in self.lines):
            assert self.proc.poll() is None, self.text()[-3000:]
            assert time.time() - t < timeout, f"no {text!r} in {timeout}s:\n" + self.text()[-3000:]
            time.sleep(0.2)
        return time.time() - t


def test_a_cut_host_is_rebuilt_and_sigint_then_keeps_the_run(cluster, tmp_path):
    """The suite's host cut: the env workers start one per worker host, the learner and rollout
    on the head; env1's link cut mid-run, its env worker is rebuilt on env0 and the run goes on;
    then Ctrl-C (SIGINT) to the driver ends it as the local trainer's does: exit 130, the
    iteration checkpointed, and a last line with the command that continues."""
    run = tmp_path / "run"
    proc = train_on_head(cluster, run, "train.total_steps=1000000", "train.save_every=1000")
    out = Output(proc)
    try:
        out.wait_for("roles:", 120)
        roles = next(line for line in out.lines if line.startswith("roles:")).strip()
        assert sorted(hosts_of(roles, "env")) == sorted(cluster.ips.values()), roles  # one per worker host
        assert hosts_of(roles, "learner") == hosts_of(roles, "rollout") == [cluster.head_ip], roles
        cluster.cut("env1")
        out.wait_for("lost: rebuilt", 90)
        time.sleep(2)  # the run goes on with the rebuilt worker
        assert proc.poll() is None, out.text()[-3000:]
        proc.send_signal(signal.SIGINT)
        proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.restore("env1")
        cluster.restart("env1")  # for the tests after this one
    out.reader.join(5)
    text = out.text()
    last = text.strip().splitlines()[-1]
    assert proc.returncode == 130 and "stopped by SIGINT; kept " in last and "Traceback" not in text, text[-3000:]
    latest = (run / "checkpoints" / "latest").read_text().strip()
    assert f"checkpoints/{latest}" in last and last.endswith(f"train --resume {run}"), last
    assert scalars(run, "rollout/env_worker_restarts")[-1] >= 1


@long_run  # 70 s; out of the suite since it passed 15 minutes (docs/results/suite.md)
def test_a_lost_host_is_replaced_and_used_again_when_it_returns(cluster, tmp_path):
    run = tmp_path / "run"
    proc = train_on_head(cluster, run, "train.total_steps=6400", "train.save_every=0")
    out = Output(proc)
    wait_for = out.wait_for

    try:
        wait_for("roles:", 120)
        time.sleep(1)  # a few iterations on both hosts
        cluster.cut("env1")
        lost_s = wait_for("lost: rebuilt", 90)
        cluster.restore("env1")
        cluster.restart("env1")  # the host returns: its Ray node starts again
        wait_for(f"moved to {cluster.ips['env1']}", 90)
        proc.wait(300)
    finally:
        if proc.poll() is None:
            proc.kill()
    out.reader.join(5)
    text = out.text()
    assert proc.returncode == 0, text[-3000:]
    dropped = scalars(run, "rollout/dropped_episodes")
    assert dropped[-1] >= 4 and dropped[0] == 0, dropped  # the lost worker's 4 episodes in progress
    assert scalars(run, "rollout/env_worker_restarts")[-1] >= 1
    print(f"lost host detected and replaced after {lost_s:.1f}s")


@long_run
def test_a_lost_head_ends_the_run_with_one_line_and_resume_continues_exactly(cluster, tmp_path):
    """The head's GCS and raylet killed after the run's checkpoint at iteration 2: the driver
    (alive on the head's host) prints one line and exits 2; on a new head `--resume` ends with
    the weights of a whole local run."""
    run = tmp_path / "run"
    proc = train_on_head(cluster, run, "train.total_steps=1024", "train.save_every=2")
    ckpt = run / "checkpoints" / "iter_000002"
    t = time.time()
    while not (ckpt / "policy" / "model.safetensors").exists() and proc.poll() is None and time.time() - t < 120:
        time.sleep(0.05)
    cluster.kill_head()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out[-3000:]
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"the Ray head at {cluster.address} stopped answering; the run stopped (last "
                           "checkpoint iter_"), out[-3000:]
    assert f" train --resume {run} train.placement.address=" in last
    cluster.new_head()
    resumed = cluster.popen("head", [sys.executable, "-m", "embodied.cli", "train", "--resume", str(run),
                                     f"train.placement.address={cluster.address}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    local = tmp_path / "local"
    train(load_config(None, TINY + ["train.total_steps=1024", "train.save_every=2", "train.backend=local",
                                    f"train.run_dir={local}", f"train.placement={ENV_ON_WORKERS % ''}"]))
    a, b = final_weights(run), final_weights(local)
    for k in a:
        assert torch.equal(a[k], b[k]), k


@long_run
def test_data_parallel_learners_on_two_hosts_equal_one_learner(cluster, tmp_path):
    """learner.count=2 spread over two hosts: the ranks' gloo group runs over the veth link, and
    the weights equal one local learner's within the data-parallel tests' tolerance."""
    exact = ["ppo.minibatches=1", "ppo.normalize_advantages=false", "train.total_steps=256"]
    learners = "{preset: disaggregated, env: {count: 1}, learner: {count: 2, num_cpus: 0.5}%s}"
    argv = [sys.executable, "-m", "embodied.cli", "train", *TINY, *exact, "train.backend=ray",
            "train.placement=" + learners % f", address: '{cluster.address}'",
            f"train.run_dir={tmp_path / 'two'}"]
    proc = cluster.popen("head", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out[-3000:]
    roles = next(line for line in out.splitlines() if line.startswith("roles:"))
    assert len(hosts_of(roles.strip(), "learner")) == 2, roles  # two hosts
    one = tmp_path / "one"
    train(load_config(None, TINY + exact + ["train.backend=local", f"train.run_dir={one}",
                                            "train.placement={preset: disaggregated, env: {count: 1}}"]))
    a, b = final_weights(tmp_path / "two"), final_weights(one)
    for k in b:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


@long_run
def test_flow_vla_on_the_worker_hosts_equals_local(cluster, tmp_path):
    """The tiny Flow-Noise VLA recipe (two cameras rendered on the worker hosts, a privileged
    critic, token log-probs) from the head: the weights of backend local's run."""
    from test_distributed_train import tiny_flow_vla

    vla = tiny_flow_vla(tmp_path / "vla")
    short = ["train.total_steps=128", "train.eval_every=0", "train.eval_episodes=2", "train.video_episodes=0",
             "train.progress=false"]
    placement = "{preset: disaggregated, env: {count: 2, num_cpus: 0.5, labels: {role: env}}%s}"
    argv = [sys.executable, "-m", "embodied.cli", "train", *vla, *short, "train.backend=ray",
            "train.placement=" + placement % f", address: '{cluster.address}'", f"train.run_dir={tmp_path / 'c'}"]
    proc = cluster.popen("head", argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-3000:]
    roles = next(line for line in out.splitlines() if line.startswith("roles:"))
    assert set(hosts_of(roles.strip(), "env")) <= set(cluster.ips.values()), roles  # on the worker hosts
    train(load_config(None, vla + short + ["train.backend=local", f"train.run_dir={tmp_path / 'l'}",
                                           "train.placement=" + placement % ""]))
    a, b = final_weights(tmp_path / "c"), final_weights(tmp_path / "l")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
