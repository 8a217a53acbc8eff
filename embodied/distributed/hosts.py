"""Hosts that leave and come back (backend ray), between iterations of the training loop.

`heal`: an env worker or rollout role whose process or host is gone is rebuilt on a node that
is still up (Ray's scheduler picks one with the role's labels and room), as the collector does
when a call fails mid-batch (embodied/distributed/sharded_rollout.py): the lost envs' episodes
in progress are dropped and counted, and the new worker's first observation takes their rows.

`rebalance`: when a node with the env workers' labels holds none of them (a host that came
back, or one added to the cluster) while another node holds two or more, one worker per such
node moves there: a new worker is built on that node, loads the old one's envs (physics,
counters, RNG: `EnvWorker.state_dict`), and the old one is ended. Nothing is dropped, and the
run's batches go on exactly as if the worker had not moved.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import torch

from embodied.distributed.sharded_episodes import GroupedCollector
from embodied.distributed.sharded_rollout import ShardedCollector


def _put_rows(obs: dict[str, Any], offset: int, new: dict[str, Any]) -> dict[str, Any]:
    """obs [b, ...] with rows [offset, offset + n) replaced by new [n, ...] (instructions too)."""
    out = dict(obs)
    for k, v in new.items():
        if torch.is_tensor(v):
            out[k] = obs[k].clone()
            out[k][offset:offset + len(v)] = v
        elif k == "instruction":
            out[k] = list(obs[k])
            out[k][offset:offset + len(v)] = list(v)
    return out


def heal(collector: ShardedCollector | GroupedCollector, wait_s: float = 2.0) -> int:
    """Rebuild the env workers and the rollout role whose process is gone -> how many. A role
    that does not answer within wait_s (a host cut off but not yet declared dead) is left to the
    next call, which fails once Ray declares it dead, and is rebuilt there. GRPO's collector
    keeps no observation between collects: its workers are only rebuilt."""
    b, n = collector.backend, 0
    if collector.make_worker is not None:
        for i in b.dead(collector.workers, wait_s):
            if isinstance(collector, GroupedCollector):
                collector.revive(i)
                n += 1
                continue
            obs = collector.revive(i)
            s = next(k for k, ids in enumerate(collector.stage_workers) if i in ids)
            first = collector.stage_workers[s][0]
            offset = collector.starts[i] - collector.starts[first]
            collector.obs[s] = _put_rows(collector.obs[s], offset, obs)
            n += 1
    if collector.make_rollout is not None and b.dead([collector.rollout], wait_s):
        collector.revive_rollout()
        n += 1
    return n


def rebalance(collector: ShardedCollector | GroupedCollector, labels: dict[str, str], timeout_s: float = 60.0) -> int:
    """Move env workers to matching nodes that hold none of them, one per node, from nodes that
    hold two or more -> how many moved."""
    b = collector.backend
    if collector.make_worker is None or len(collector.workers) < 2:
        return 0
    nodes = [n for n in b.nodes() if all(n["labels"].get(k) == v for k, v in labels.items())]
    try:
        placed = b.get([b.call(w, "where") for w in collector.workers])
    except b.dead_errors:  # a worker lost since heal(): the next batch rebuilds it first
        return 0
    count = Counter(w["node"] for w in placed)
    moved = 0
    for node in (n for n in nodes if count[n["node"]] == 0):
        crowded = max(count, key=count.get)
        if count[crowded] < 2:
            break
        i = max(k for k, w in enumerate(placed) if w["node"] == crowded)
        t = time.perf_counter()
        new = collector.make_worker(i, node=node["node"])
        try:
            state = b.get(b.call(collector.workers[i], "state_dict"))
        except b.dead_errors:  # lost meanwhile: rebuilt by the next batch
            b.kill(new)
            return moved
        loaded = b.call(new, "load_state_dict", state)
        if not b.wait_ready(loaded, timeout_s):  # no room there after all: keep the worker where it is
            b.kill(new)
            continue
        b.get(loaded)
        b.kill(collector.workers[i])
        collector.workers[i] = new
        count[crowded] -= 1
        count[node["node"]] += 1
        placed[i] = {"node": node["node"], "ip": node["ip"]}
        moved += 1
        collector.events.append(f"env worker {i} moved to {node['ip']} (a host with none) in "
                                f"{time.perf_counter() - t:.1f}s, its envs as they were")
    return moved
