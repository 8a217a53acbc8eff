"""Env steps per second of synchronous vs pipelined rollout over roles (embodied/distributed).

The policy is an MLP whose width is picked so that one inference on the whole batch takes about
as long as one env step of the whole batch (a balanced load, where a 2-stage pipeline can at
most double the throughput). Modes, all with backend local and the same envs:

    train.py     the single-process RolloutCollector (one VecEnv, `--threads` physics threads,
                 torch on `--threads` threads): what `embodied train` does today
    sync         2 env-worker shards and a rollout role, stages=1: infer, then step
    pipelined    the same roles, stages=2: one stage's envs step on their worker's thread
                 while the policy infers for the other stage

--overlap instead measures the one-version-stale schedule (train.max_staleness 1) against the
synchronous one: whole iterations (collect, update, weight push) of one env worker, the rollout
role and the learner, with ppo.epochs picked so that an update takes about as long as a collect
(a balanced load, where the overlap can at most double the throughput). `--backend ray` (the
default) makes the roles Ray actors on this machine; `--backend local` keeps them in this
process, the learner on a thread of its own in the stale mode (inline when synchronous, as
`train_roles` builds them). It reports env steps/s, the CPU seconds per wall second of every
process in this session (the driver, Ray's own processes and the actors), and each role's busy
seconds per iteration with their CPU seconds, measured inside the role.

Usage: python benchmarks/bench_pipeline.py [--envs 64] [--steps 32] [--repeats 3] [--concurrency]
       python benchmarks/bench_pipeline.py --overlap [--backend ray|local] [--envs 64] [--steps 32]
           [--iterations 6] [--repeats 3]
Repeats alternate the modes; the table gives the median of each and the ratios to sync, the
CPU time this process got per second of wall time while collecting (cpu/wall: on a 2-core
machine a pipeline can only pay where it is near 2 in pipelined mode), the CPU time per env
step (what the pipeline costs, whatever the load), and for the roles the driver's per-collect
seconds waiting on inference and on env workers.

--concurrency first says why a pipeline can or cannot pay here: the share of an env step and
of an inference spent in C calls that release the GIL (cProfile); for one and for two threads
running pure Python, env steps, inference, or an env step beside an inference: calls per
second, CPU seconds per wall second, and context switches per second, voluntary (mostly
waits for the GIL) and involuntary (preemptions); then one and two processes stepping envs, in
this session and each in its own (Linux's autogroup scheduling shares the CPUs between sessions
first). Two threads that run in parallel get about twice the calls of one; two that take turns
get the same total, on the GIL when their voluntary switches are many, on a CPU share that a
second thread does not enlarge when they are few.

benchmarks/bench_pipeline_recipe.py measures the same two modes on a training recipe's whole
iterations (e.g. the PushCube VLA recipe).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import resource
import statistics
import threading
import time
from pathlib import Path

import torch

from embodied.config import load_config
from embodied.distributed.backend import LocalBackend
from embodied.distributed.loop import build_roles
from embodied.distributed.placement import preset
from embodied.rl.rollout import RolloutCollector
from embodied.run.env import build_env
from embodied.run.device import resolve_device, to_device
from policies.registry import build_policy


DEVICE = "cpu"  # --device: where the policy runs (train.device), in every mode


def config(envs: int, steps: int, hidden: int, threads: int) -> object:
    return load_config(None, [f"env.task=PushCube", f"env.num_envs={envs}", f"ppo.rollout_steps={steps}",
                              f"policy.hidden_sizes=[{hidden},{hidden}]", f"env.num_threads={threads}",
                              f"train.device={DEVICE}"])


def balance(envs: int, threads: int) -> tuple[int, float, float]:
    """-> (hidden width, env step seconds, inference seconds) with inference closest to an env step."""
    cfg = config(envs, 1, 64, threads)
    env = build_env(cfg.env)
    obs, _ = env.reset(seed=0)
    action = torch.zeros(envs, env.spec.action_dim)
    t = time.perf_counter()
    for _ in range(20):
        obs = env.step(action).obs
    env_s = (time.perf_counter() - t) / 20
    best = None
    for hidden in (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096):
        dev = resolve_device(DEVICE)
        policy = build_policy(config(envs, 1, hidden, threads).policy, env.spec).to(dev)
        obs_d = to_device(obs, dev)
        with torch.no_grad():
            policy.act(obs_d)
            t = time.perf_counter()
            for _ in range(10):
                policy.act(obs_d).actions.cpu()  # the actions go back to the CPU env
        inf_s = (time.perf_counter() - t) / 10
        if best is None or abs(inf_s - env_s) < abs(best[2] - env_s):
            best = (hidden, env_s, inf_s)
        if inf_s > env_s:
            break
    env.close()
    return best


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run_train_py(cfg: object, threads: int) -> tuple[float, float]:
    torch.set_num_threads(threads)
    env = build_env(cfg.env)
    torch.manual_seed(0)
    policy = build_policy(cfg.policy, env.spec).to(resolve_device(cfg.train.device))
    collector = RolloutCollector(env, policy, cfg.ppo.rollout_steps)
    collector.reset(seed=0)
    collector.collect()  # warm-up
    t, c = time.perf_counter(), cpu_seconds()
    traj = collector.collect()
    wall = time.perf_counter() - t
    env.close()
    return int(traj.valid.sum()) / wall, (cpu_seconds() - c) / wall


def run_roles(cfg: object, stages: int) -> tuple[float, float, dict[str, float]]:
    torch.set_num_threads(1)
    place = preset("pipelined" if stages > 1 else "collocated", env_workers=2)
    backend = LocalBackend(place)
    try:
        collector, _ = build_roles(cfg, place, backend)
        collector.reset(seed=0)
        collector.collect()  # warm-up
        c = cpu_seconds()
        batch = collector.collect()
        wall = batch.seconds["collect"]
        return batch.env_steps / wall, (cpu_seconds() - c) / wall, batch.seconds
    finally:
        backend.shutdown()


def session_cpu_seconds() -> float:
    """CPU seconds used so far by the processes of this session (Ray's actors stay in it)."""
    sid, tick, total = os.getsid(0), os.sysconf("SC_CLK_TCK"), 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if int(fields[3]) == sid:  # session id; utime and stime are fields 14 and 15 of stat
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def iterate(backend: object, collector: object, learners: list, iterations: int, stale: bool) -> dict[str, float]:
    """train_roles' schedule (embodied/distributed/loop.py) without its logging; -> each
    role's busy and CPU seconds summed over the iterations."""
    from embodied.distributed.loop import role_times

    b, busy, pending = backend, {}, None

    def finish(futures: list) -> None:
        b.get(futures)
        collector.set_weights(*b.get(b.call(learners[0], "weights")))
        for k, v in role_times(b, collector, learners, 0.0).items():
            if k.endswith(("busy_seconds", "cpu_seconds")):
                busy[k] = busy.get(k, 0.0) + v

    for _ in range(iterations):
        batch = collector.collect()
        if pending is not None:  # stale: the previous update ran during this collect
            finish(pending)
        pending = [b.call(lrn, "update", batch.traj) for lrn in learners]
        if not stale:
            finish(pending)
            pending = None
    if pending is not None:
        finish(pending)
    return busy


def run_overlap(cfg: object, stale: bool, iterations: int, backend_name: str) -> tuple[float, float, dict[str, float]]:
    """-> (env steps/s, session CPU per wall second, busy seconds per iteration per role) of
    `iterations` iterations on `backend_name` after one warm-up iteration."""
    from embodied.config import with_stale_defaults
    from embodied.distributed.backend import make_backend

    cfg = with_stale_defaults(cfg, int(stale))  # as train_roles: a stale run recomputes the log-probs
    place = preset("collocated", env_workers=1)
    backend = make_backend(backend_name, place)
    try:
        collector, learners = build_roles(cfg, place, backend, learner_thread=stale)
        first = collector.reset(seed=0)
        backend.get([backend.call(lrn, "observe", first) for lrn in learners])
        collector.set_weights(*backend.get(backend.call(learners[0], "weights")))
        iterate(backend, collector, learners, 1, False)  # warm-up
        t, c = time.perf_counter(), session_cpu_seconds()
        busy = iterate(backend, collector, learners, iterations, stale)
        wall = time.perf_counter() - t
        steps = iterations * cfg.env.num_envs * cfg.ppo.rollout_steps
        return steps / wall, (session_cpu_seconds() - c) / wall, {k: v / iterations for k, v in busy.items()}
    finally:
        backend.shutdown()


def overlap(envs: int, steps: int, iterations: int, repeats: int, backend_name: str) -> None:
    """Print the stale vs synchronous table (see the module doc)."""
    if backend_name == "ray":
        import ray

        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        hidden = 256
        probe = config(envs, steps, hidden, 1)
        _, _, busy = run_overlap(probe, False, 2, backend_name)
        per_epoch = busy["learner_busy_seconds"] / probe.ppo.epochs
        collect = busy["env_busy_seconds"] + busy["rollout_busy_seconds"]  # they take turns in a collect
        epochs = max(1, round(collect / per_epoch))
        cfg = load_config(None, [f"env.task=PushCube", f"env.num_envs={envs}", f"ppo.rollout_steps={steps}",
                                 f"policy.hidden_sizes=[{hidden},{hidden}]", "env.num_threads=1",
                                 f"ppo.epochs={epochs}"])
        print(f"backend {backend_name}; balanced load: MLP [{hidden},{hidden}], {envs} envs x {steps} steps, "
              f"ppo.epochs={epochs} (collect {collect:.3f} s busy, update {per_epoch * epochs:.3f} s); load average "
              f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        rates: dict[str, list[tuple]] = {"sync": [], "stale": []}
        for _ in range(repeats):
            for mode in rates:
                rates[mode].append(run_overlap(cfg, mode == "stale", iterations, backend_name))
        sync = statistics.median(r[0] for r in rates["sync"])
        print(f"{'mode':<6} {'env steps/s (median)':>21} {'vs sync':>8} {'cpu/wall':>9}  busy (CPU) s/iteration: "
              f"env, rollout, learner    runs")
        for mode, r in rates.items():
            med, cpu = statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)
            busy = ", ".join(f"{statistics.median(x[2][f'{k}_busy_seconds'] for x in r):.3f} "
                             f"({statistics.median(x[2][f'{k}_cpu_seconds'] for x in r):.3f})"
                             for k in ("env", "rollout", "learner"))
            print(f"{mode:<6} {med:>21.0f} {med / sync:>7.2f}x {cpu:>9.2f}  {busy:<46}"
                  f"{', '.join(f'{x[0]:.0f}' for x in r)}")
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        if backend_name == "ray":
            ray.shutdown()


def in_c_calls(fn: object, calls: int, names: tuple[str, ...]) -> float:
    """Share of fn's time spent in the built-in calls whose names contain one of `names`."""
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(tt for (_, _, name), (_, _, tt, _, _) in stats.items())
    inside = sum(tt for (_, _, name), (_, _, tt, _, _) in stats.items() if any(n in name for n in names))
    return inside / total


def threads_rate(fns: list, seconds: float = 3.0) -> list[tuple[float, float, float, float]]:
    """Run each fn in a loop on its own thread for `seconds`; -> per thread (calls/s, CPU
    seconds per wall second, voluntary and involuntary context switches per second). A thread
    that waits for the GIL blocks (a voluntary switch); one that the scheduler takes the CPU
    from is preempted (an involuntary one)."""
    stop, out = time.perf_counter() + seconds, [(0.0, 0.0, 0.0, 0.0)] * len(fns)

    def loop(i: int, fn: object) -> None:
        r0, t, n = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter(), 0
        while time.perf_counter() < stop:
            fn()
            n += 1
        r1, wall = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter() - t
        cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
        out[i] = (n / wall, cpu / wall, (r1.ru_nvcsw - r0.ru_nvcsw) / wall, (r1.ru_nivcsw - r0.ru_nivcsw) / wall)

    threads = [threading.Thread(target=loop, args=(i, fn)) for i, fn in enumerate(fns)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return out


def _step_process(envs: int, seconds: float, own_session: bool, out: object) -> None:
    """A child process: step a fresh env for `seconds`; put its calls per second on `out`."""
    if own_session:
        os.setsid()  # its own session, hence its own scheduler autogroup
    torch.set_num_threads(1)
    env = build_env(config(envs, 1, 64, 1).env)
    env.reset(seed=0)
    action = torch.zeros(envs, env.spec.action_dim)
    stop, n, t = time.perf_counter() + seconds, 0, time.perf_counter()
    while time.perf_counter() < stop:
        env.step(action)
        n += 1
    out.put(n / (time.perf_counter() - t))


def processes_rate(envs: int, count: int, own_session: bool, seconds: float = 3.0) -> list[float]:
    """Env-step calls per second of `count` processes stepping at the same time."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_step_process, args=(envs, seconds, own_session, out)) for _ in range(count)]
    for p in procs:
        p.start()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return rates


def concurrency(envs: int, hidden: int) -> None:
    """Print the GIL-free shares and the one-thread / two-thread rates (see the module doc)."""
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; sched_autogroup_enabled="
          f"{autogroup.read_text().strip() if autogroup.exists() else 'n/a'}")
    cfg = config(envs, 1, hidden, 1)

    def stepper():
        env = build_env(cfg.env)
        env.reset(seed=0)
        action = torch.zeros(envs, env.spec.action_dim)
        return lambda: env.step(action)

    env = build_env(cfg.env)
    obs, _ = env.reset(seed=0)
    policy = build_policy(cfg.policy, env.spec)

    def act() -> None:
        with torch.no_grad():
            policy.act(obs)

    def python() -> None:
        sum(range(20000))
        [i for i in range(2000)]

    step_a, step_b = stepper(), stepper()
    print(f"env step of {envs} envs: {in_c_calls(step_a, 100, ('_batch.step',)):.0%} of its time in MuJoCo's "
          f"batch step; inference: {in_c_calls(act, 100, ('torch._C', 'torch.tanh')):.0%} in torch ops")
    for name, fns in (("python", [python]), ("python x2", [python, python]), ("env step", [step_a]),
                      ("env step x2", [step_a, step_b]), ("inference", [act]), ("env + inference", [step_a, act])):
        r = threads_rate(fns)
        print(f"{name:<16} calls/s {' + '.join(f'{x[0]:.0f}' for x in r):<10} cpu/wall "
              f"{' + '.join(f'{x[1]:.2f}' for x in r):<12} GIL waits/s {' + '.join(f'{x[2]:.0f}' for x in r):<10} "
              f"preemptions/s {' + '.join(f'{x[3]:.0f}' for x in r)}")
    for count, own in ((1, False), (2, False), (2, True)):
        rates = processes_rate(envs, count, own)
        where = "own sessions" if own else "this session"
        print(f"env step, {count} process(es) in {where}: calls/s {' + '.join(f'{r:.0f}' for r in rates)}")
    env.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=64)
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="physics and torch threads of the train.py mode")
    ap.add_argument("--concurrency", action="store_true", help="first measure what can run in parallel here")
    ap.add_argument("--overlap", action="store_true", help="max_staleness 1 vs 0 instead (module doc)")
    ap.add_argument("--backend", choices=("ray", "local"), default="ray", help="the --overlap roles' backend")
    ap.add_argument("--iterations", type=int, default=6, help="timed iterations per --overlap run")
    ap.add_argument("--device", default="cpu", help="train.device of the policy in every mode (cpu, cuda, ...)")
    args = ap.parse_args()
    global DEVICE
    DEVICE = args.device
    if args.overlap:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # Ray on 127.0.0.1 only
        overlap(args.envs, args.steps, args.iterations, args.repeats, args.backend)
        return

    torch.set_num_threads(1)
    hidden, env_s, inf_s = balance(args.envs // 2, 1)  # one stage: half the batch, one thread
    print(f"balanced load: MLP [{hidden},{hidden}]; half-batch env step {env_s * 1e3:.1f} ms, "
          f"inference {inf_s * 1e3:.1f} ms (1 thread each)")
    if args.concurrency:
        concurrency(args.envs // 2, hidden)
    roles_cfg = config(args.envs, args.steps, hidden, 1)
    rates: dict[str, list[tuple]] = {"train.py": [], "sync": [], "pipelined": []}
    for _ in range(args.repeats):
        rates["train.py"].append(run_train_py(config(args.envs, args.steps, hidden, args.threads), args.threads))
        rates["sync"].append(run_roles(roles_cfg, 1))
        rates["pipelined"].append(run_roles(roles_cfg, 2))
    sync = statistics.median(r[0] for r in rates["sync"])
    print(f"{'mode':<10} {'env steps/s (median)':>21} {'vs sync':>8} {'cpu/wall':>9} {'CPU us/step':>12} "
          f"{'infer s':>8} {'env wait s':>10}  runs")
    for mode, r in rates.items():
        med, cpu = statistics.median(x[0] for x in r), statistics.median(x[1] for x in r)
        per_step = statistics.median(x[1] / x[0] * 1e6 for x in r)  # CPU time per env step: load-independent
        waits = ("", "") if mode == "train.py" else tuple(
            f"{statistics.median(x[2][k] for x in r):.3f}" for k in ("inference", "env_wait"))
        print(f"{mode:<10} {med:>21.0f} {med / sync:>7.2f}x {cpu:>9.2f} {per_step:>12.0f} {waits[0]:>8} "
              f"{waits[1]:>10}  {', '.join(f'{x[0]:.0f}' for x in r)}")


if __name__ == "__main__":
    main()
