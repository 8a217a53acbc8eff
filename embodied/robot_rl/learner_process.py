"""The learner process: SAC (embodied/robot_rl/agent.py) on transitions streamed from the
actor, weights pushed back every learner.push_every_s, a checkpoint every
learner.checkpoint_every_s. It starts from the last checkpoint (run_dir/learner.pt) when there
is one, else from the starting policy (`prepare`: behaviour cloning on a few demonstrations, or
with `residual` a residual that is exactly zero: embodied/robot_rl/residual.py),
and rebuilds its buffers from disk: the demonstrations, and every episode the actor recorded
(intervened transitions into the demo buffer too). A hello tells the actor which episodes are
loaded; the actor re-sends the rest, and (episode, step) keys drop any duplicate.

Pacing: one update (utd critic steps, then the actor) per transition received at most
(learner.max_updates_per_transition), after learner.warmup_transitions; the first
learner.critic_warmup_updates leave the actor as it is, so a fresh critic cannot pull the
starting policy apart. In lockstep (actor.lockstep, for a twin that can wait), the learner
tells the actor ("synced") once it has done every update due for what it received, and pushes
weights every push_every_s of robot time (push_every_s * robot.control_hz transitions) instead
of wall time, so that a run does not depend on how fast the machine is. Pushes go on while it
is behind (an actor that stopped waiting for a stalled learner gets weights again)."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch

from embodied.data.layout import DatasetError
from embodied.robot_rl.agent import SACAgent
from embodied.robot_rl.augment import random_shift
from embodied.robot_rl.config import FinetuneConfig
from embodied.robot_rl.data import committed_episodes, dataset_transitions, load_policy, save_policy
from embodied.robot_rl.link import connect_learner, poll_all, to_wire
from embodied.robot_rl.obs import image_of
from embodied.robot_rl.replay import Replay, mixed_batch
from embodied.robot_rl.residual import zero_residual_actor

log = logging.getLogger("embodied.robot_rl.learner_process")


def demo_transitions(cfg: FinetuneConfig, episodes: int | None = None) -> list[dict]:
    """The first `episodes` demos (default init.bc_episodes, those behaviour cloning reads; 0: all);
    the demo buffer starts with the first init.demo_episodes (default the same). None with
    residual: the demonstrations carry no base actions; the operator's takeovers fill the demo
    buffer."""
    if not cfg.demos or cfg.residual is not None:
        return []
    n = committed_episodes(cfg.demos)
    if n == 0:
        raise DatasetError(f"demos: {cfg.demos} holds no episodes")
    want = cfg.init.bc_episodes if episodes is None else episodes
    k = min(want, n) if want > 0 else n
    # chunks: a window at every step of a demonstration (each a valid transition of its chunk)
    return dataset_transitions(cfg.demos, cfg.obs_key, list(range(k)), reward=reward_source(cfg),
                               chunk=cfg.sac.chunk, gamma=cfg.sac.gamma, stride=1)[0]


def reward_source(cfg: FinetuneConfig) -> str:
    """What a recorded transition's reward is: the success flag (what a robot gives), or with
    the in-process twin's dense reward (sim.reward: dense) the recorded reward column."""
    return "recorded" if cfg.sim is not None and cfg.sim.reward == "dense" else "success"


def prepare(cfg: FinetuneConfig) -> Path:
    """The starting policy (version 0) in run_dir/policy.safetensors, unless there is one: a
    weights file (init.weights) or behaviour cloning on the first init.bc_episodes demos (MSE of
    the squashed mean, plus a pull of log std towards -1.5 for a modest exploration noise)."""
    run = Path(cfg.run_dir)
    path = run / "policy.safetensors"
    if path.exists():
        return path
    torch.manual_seed(cfg.learner.seed)
    run.mkdir(parents=True, exist_ok=True)
    if cfg.residual is not None:  # zero residual: the VLA's own actions (embodied/robot_rl/residual.py)
        obs = None
        if cfg.demos and committed_episodes(cfg.demos):
            obs = torch.stack([t["obs"] for t in dataset_transitions(cfg.demos, cfg.obs_key)[0]])
        dim = obs.shape[1] if obs is not None else cfg.robot.privileged_dim if cfg.obs_key == "privileged" else 0
        if dim < 1:
            raise DatasetError("demos: a residual on obs_key 'state' needs demos "
                               "(the observation's width and statistics)")
        save_policy(path, zero_residual_actor(obs, dim, cfg.robot.action_dim, cfg.sac.hidden, cfg.sac.obs_min_std),
                    0, cfg.sac.hidden)
        return path
    if cfg.init.weights:
        actor, _ = load_policy(cfg.init.weights)
        save_policy(path, actor, 0, cfg.sac.hidden)
        return path
    demos = demo_transitions(cfg)
    if not demos:
        raise DatasetError("demos: behaviour cloning (init.bc_episodes > 0) needs a demonstration dataset")
    obs = torch.stack([t["obs"] for t in demos])
    act = torch.stack([t["action"] for t in demos]).clamp(-1, 1)
    image = image_of(cfg.obs_key, cfg.robot.image_size)
    agent = SACAgent(obs.shape[1], act.shape[1], cfg.sac, image)  # act [N, H * A] with sac.chunk H
    agent.set_obs_stats(obs)
    agent.actor.detach_encoder = False  # behaviour cloning trains the encoder too
    g = torch.Generator().manual_seed(cfg.learner.seed)
    opt = torch.optim.Adam(agent.actor.parameters(), lr=cfg.init.bc_lr)
    for _ in range(cfg.init.bc_steps):
        idx = torch.randint(len(obs), (cfg.sac.batch_size,), generator=g)
        o = obs[idx] if image is None else random_shift(obs[idx], image, cfg.sac.image_shift, g)  # as SAC's batches
        mean, log_std = agent.actor.dist(o)
        loss = ((torch.tanh(mean) - act[idx]) ** 2).mean() + 0.01 * ((log_std + 1.5) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    save_policy(path, agent.actor, 0, cfg.sac.hidden)
    return path


class Learner:
    def __init__(self, cfg: FinetuneConfig):
        self.cfg, self.dir = cfg, Path(cfg.run_dir)
        torch.manual_seed(cfg.learner.seed)
        actor, version = load_policy(prepare(cfg))
        self.agent = SACAgent(actor.norm.mean.numel(), actor.action_dim, cfg.sac,
                              actor.encoder.image if actor.encoder is not None else None)
        ckpt = self.dir / "learner.pt"
        if ckpt.exists():
            state = torch.load(ckpt, weights_only=True)
            self.agent.load_state_dict(state["agent"])
            version = int(state["version"])
            log.info("learner: resumed from %s (version %d, %d updates)", ckpt, version, self.agent.updates)
        else:
            self.agent.actor.load_state_dict(actor.state_dict())
            for net in (self.agent.critic, self.agent.target):
                net.norm.load_state_dict(actor.norm.state_dict())
                if actor.encoder is not None:  # the critic's is the actor's (shared); the target's a copy
                    net.encoder.load_state_dict(actor.encoder.state_dict())
        self.demo, self.online = Replay(), Replay()
        demo_k = cfg.init.demo_episodes if cfg.init.demo_episodes is not None else cfg.init.bc_episodes
        for t in demo_transitions(self.cfg, demo_k):
            self.demo.add(t)
        self.seen: set[tuple[int, int]] = set()
        self._episode, self._pending = -1, []  # learner.successes_as_demos: the current episode's transitions
        scale = cfg.residual.scale if cfg.residual is not None else None
        loaded, episodes = (dataset_transitions(self.dir / "online", cfg.obs_key, residual_scale=scale,
                                                 reward=reward_source(cfg), chunk=cfg.sac.chunk, gamma=cfg.sac.gamma)
                            if (self.dir / "online").exists() else ([], []))
        for t in loaded:
            self._add(t)
        self.loaded_episodes = len(episodes)
        newest = max([version, *(int(t["version"]) for t in loaded)])
        self.version = newest + (1 if loaded or ckpt.exists() else 0)  # versions only grow across restarts
        self.gen = torch.Generator().manual_seed(cfg.learner.seed)
        self.stats: dict[str, float] = {}

    def _add(self, t: dict) -> None:
        """Into the online buffer; intervened transitions into the demo buffer too, and with
        learner.successes_as_demos every transition of an episode that succeeded (once it has)."""
        self.online.add(t)
        if t["intervened"]:
            self.demo.add(t)
        if not self.cfg.learner.successes_as_demos:
            return
        ep = int(t.get("episode", -1))
        if ep != self._episode:  # transitions come in order: a new episode drops the last one's
            self._episode, self._pending = ep, []
        self._pending.append(t)
        if t["terminated"] and float(t["reward"]) > 0:
            for u in self._pending:
                if not u["intervened"]:
                    self.demo.add(u)
            self._pending = []

    def checkpoint(self) -> None:
        tmp = self.dir / f".learner.pt.tmp-{os.getpid()}"
        torch.save({"agent": self.agent.state_dict(), "version": self.version}, tmp)
        os.replace(tmp, self.dir / "learner.pt")
        save_policy(self.dir / "policy.safetensors", self.agent.actor, self.version, self.cfg.sac.hidden)

    def _push(self, conn: Any) -> None:
        conn.send(("weights", self.version, to_wire(self.agent.actor.state_dict())))

    def _log(self) -> None:
        """One line of run_dir/learner.jsonl per weight push: counters and the last update's stats."""
        row = {"version": self.version, "updates": self.agent.updates, "online": len(self.online),
               "demo": len(self.demo), **{k: round(v, 5) for k, v in self.stats.items()}}
        with open(self.dir / "learner.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")

    def can_update(self) -> bool:
        lc = self.cfg.learner
        n = len(self.online) - lc.warmup_transitions
        return n > 0 and self.agent.updates < n * lc.max_updates_per_transition

    def update(self) -> None:
        c, lc = self.cfg.sac, self.cfg.learner
        batches = [mixed_batch(self.online, self.demo, c.batch_size, c.demo_fraction, self.gen) for _ in range(c.utd)]
        self.stats = self.agent.update(batches, actor=self.agent.updates >= lc.critic_warmup_updates)

    def serve(self, timeout_s: float = 60.0) -> str:
        """Connect to the actor and learn until it says stop (or goes away). Returns why it ended."""
        lc, lockstep = self.cfg.learner, self.cfg.actor.lockstep
        # lockstep: robot time (a transition is sac.chunk robot steps)
        push_every_n = max(1, round(lc.push_every_s * self.cfg.robot.control_hz / self.cfg.sac.chunk))
        conn = connect_learner(self.dir, timeout_s)
        conn.send(("hello", {"episodes": self.loaded_episodes}))
        self._push(conn)
        last_push = last_ckpt = time.monotonic()
        newest, synced, pushed_at = (-1, -1), (-1, -1), len(self.online)
        try:
            while True:
                for msg in poll_all(conn):
                    if msg[0] == "transition":
                        t = msg[1]
                        key = (int(t["episode"]), int(t["step"]))
                        newest = max(newest, key)
                        if int(t["episode"]) >= self.loaded_episodes and key not in self.seen:
                            self.seen.add(key)
                            self._add(t)
                    elif msg[0] == "stop":
                        return str(msg[1])
                updated = self.can_update()
                if updated:
                    self.update()
                now = time.monotonic()
                if lockstep:  # weights every push_every_n transitions, even while behind (the actor
                    # stopped waiting: a stall longer than actor.learner_timeout_s); "synced" once caught up
                    if len(self.online) - pushed_at >= push_every_n:
                        self._new_version(conn)
                        pushed_at = len(self.online)
                    if not updated and newest > synced:
                        conn.send(("synced", newest))
                        synced = newest
                elif now - last_push >= lc.push_every_s:
                    self._new_version(conn)
                    last_push = now
                if now - last_ckpt >= lc.checkpoint_every_s:
                    self.checkpoint()
                    last_ckpt = now
                if not updated:
                    conn.poll(0.01)
        except (EOFError, OSError):
            return "actor gone"
        finally:
            self.checkpoint()
            conn.close()

    def _new_version(self, conn: Any) -> None:
        self.version += 1
        self._push(conn)
        self._log()


def run_learner(cfg: FinetuneConfig) -> str:
    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    learner = Learner(cfg)
    why = learner.serve()
    log.info("learner: stopped (%s) at version %d after %d updates; %d online, %d demo transitions",
             why, learner.version, learner.agent.updates, len(learner.online), len(learner.demo))
    return why
