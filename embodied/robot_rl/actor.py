"""The actor process: drives the robot (RobotEnv behind its safety layer, or with `sim:` the
task in this process, embodied/robot_rl/sim_robot.py) with the newest weights, lets an operator
take over from the teleop topic, records every episode (LeRobot v3; a success's frame kept as
one more row) and streams each transition, tagged with the weight version it was acted with,
to the learner.

Per step: newest weights from the link -> action from the policy (sampled; with sac.chunk H
the next of the chunk of H actions it gave at the chunk's first step; with `residual`,
the frozen VLA's action plus the policy's bounded residual, embodied/robot_rl/residual.py) -> the operator's
action instead while it is in control (the transition is marked intervened) -> env.step (the
safety filter, then the command) -> an operator label (labels:) may end the episode -> at a
chunk's end (every step with single actions; earlier when the episode ends) its transition to
the learner (replay.chunk_transition: the actions executed, the operator's included) -> with
actor.lockstep, wait for the learner's updates. If no weights came for actor.learner_timeout_s, the learner
is lost: "continue" acts on the last weights, "hold" sends nothing until weights come again.
The run ends after actor.episodes training episodes, at an e-stop (clean: the episode so far is
recorded, exit code 0) or at a robot error (one line, the episode so far recorded, code 1).
progress.jsonl gets one line per episode and per held-out evaluation."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from embodied.robot_rl.config import FinetuneConfig
from embodied.robot_rl.data import load_policy
from embodied.robot_rl.labels import Labels
from embodied.robot_rl.link import ActorLink, to_wire
from embodied.robot_rl.obs import obs_keys, obs_vector
from embodied.robot_rl.replay import chunk_transition
from embodied.robot_rl.residual import BasePolicy, compose, residual_of
from embodied.robot_rl.sim_robot import SimOperator, SimRobot
from robot_bridge.recorder import camera_transform_of, episode_writer
from embodied.run.stop import stoppable
from robot_bridge.robot_env import RobotEnv
from robot_bridge.teleop import Teleop
from sims.vecenv import EnvError

log = logging.getLogger("embodied.robot_rl.actor")


class Actor:
    def __init__(self, cfg: FinetuneConfig, env: RobotEnv | SimRobot | None = None):
        self.cfg, self.dir = cfg, Path(cfg.run_dir)
        self.policy, self.version = load_policy(self.dir / "policy.safetensors")
        if self.policy.action_dim != cfg.sac.chunk * cfg.robot.action_dim:
            raise EnvError(f"sac.chunk: {cfg.sac.chunk} actions of {cfg.robot.action_dim} (robot.action_dim), but "
                           f"{self.dir / 'policy.safetensors'} gives {self.policy.action_dim} values")
        if env is None:  # success from the twin's topic, the operator, or a learned classifier
            from embodied.robot_rl.reward import classifier_for_robot

            clf = classifier_for_robot(cfg.reward_classifier, cfg.robot) if cfg.robot.success == "classifier" else None
            env = (SimRobot(cfg.robot, cfg.sim, success_fn=clf) if cfg.sim is not None
                   else RobotEnv(cfg.robot, success_fn=clf))
        self.env = env
        if cfg.actor.frames_after_success:  # the actor resets, after the frames past a success
            self.env.autoreset = False
        # residual: the frozen VLA's action b per frame (obs["base_action"] [1, A]); the policy is the residual
        self.base = BasePolicy(cfg.residual, cfg.robot.action_dim) if cfg.residual is not None else None
        self.teleop: Teleop | SimOperator | None = None  # the operator: action() or None, before each step
        if cfg.teleop is not None:
            self.teleop = Teleop(self.env.tr, cfg.teleop, cfg.robot.topic(cfg.teleop.topic))
        elif cfg.sim is not None and cfg.sim.operator:
            self.teleop = SimOperator(self.env, cfg.robot.task, cfg.sim)
        self.labels = (Labels(cfg.labels, getattr(self.env, "tr", None), cfg.robot.topic(cfg.labels.topic or ""))
                       if cfg.labels is not None else None)
        spec = {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(self.env.spec).items()}
        # the camera transform of the robot's frames goes into the dataset's metadata (docs/ros2.md)
        self.writer = episode_writer(self.dir / "online", cfg.robot.task, spec, camera_transform_of(self.env))
        self.link = ActorLink(self.dir, cfg.actor.port)
        self.memory: dict[int, list[dict]] = {}  # this run's episodes, for a learner that (re)connects
        self.gen = torch.Generator().manual_seed(cfg.actor.seed)
        self.robot_steps = 0  # every step sent to the robot (training and evaluation episodes)
        self.train_steps = 0  # the steps of training episodes
        self.held_s = 0.0
        self.latency: list[float] = []  # s, newest joint state received -> its command sent
        self.sent_at: list[float] = []  # monotonic send times of training commands
        self.t0 = time.monotonic()
        self._progress = open(self.dir / "progress.jsonl", "a")
        self.learner_alive: Any = None  # () -> bool: the learner process lives (set by run.py)

    def _check_robot(self, env: RobotEnv) -> None:
        """RobotMismatch (one line) unless the joint states and every key of obs_key (and the
        residual VLA's cameras) arrive (robot_bridge/robot_check.py)."""
        from robot_bridge.robot_check import START_TIMEOUT_S, check_robot_gives

        needs = ["state", *obs_keys(self.cfg.obs_key)]
        if self.base is not None:  # the frozen VLA reads its cameras
            needs += [f"rgb_{c}" for c in self.base.vla.config.cameras]
        check_robot_gives(env, needs, max(START_TIMEOUT_S, self.cfg.robot.reset_timeout_s),
                          who=f"obs_key {self.cfg.obs_key}")

    # ------------------------------------------------------------------ the learner
    def _poll_link(self) -> None:
        got = self.link.weights()
        if got is not None:
            version, sd = got
            self.policy.load_state_dict({k: torch.as_tensor(v) for k, v in sd.items()})
            self.version = version
        while not self.link.hello.empty():
            have = self.link.hello.get()
            for ep in sorted(e for e in self.memory if e >= have):
                for t in self.memory[ep]:
                    self.link.send(("transition", to_wire(t)))

    def _learner_lost(self) -> bool:
        return time.monotonic() - self.link.last_weights_time > self.cfg.actor.learner_timeout_s

    def _wait_synced(self, key: tuple[int, int]) -> None:
        """actor.lockstep: wait until the learner is done with the transition `key` (or is lost).
        Before a learner has first connected, wait for it as long as its process lives
        (`learner_alive`, set by `embodied finetune-robot`; without it, as long as it takes)."""
        t = told = time.monotonic()
        while self.link.synced < key and (not self._learner_lost() or self._first_learner_coming()):
            self.link.heard.wait(0.05)
            self.link.heard.clear()
            self._poll_link()
            if time.monotonic() - told > self.cfg.actor.learner_timeout_s and not self.link.ever_connected:
                log.warning("actor: lockstep: waiting for the learner to connect")
                told = time.monotonic()
        if self.link.synced < key:
            log.warning("actor: lockstep: no word from the learner for %.1f s; acting on without it",
                        self.cfg.actor.learner_timeout_s)
        self.held_s += time.monotonic() - t

    def _first_learner_coming(self) -> bool:
        return not self.link.ever_connected and (self.learner_alive is None or self.learner_alive())

    def _hold_for_learner(self) -> None:
        """on_learner_loss "hold": send nothing until weights come (the robot holds)."""
        if self.cfg.actor.on_learner_loss != "hold" or not self._learner_lost():
            return
        log.warning("actor: no weights for %.1f s; holding until the learner is back", self.cfg.actor.learner_timeout_s)
        t = time.monotonic()
        while self._learner_lost():
            time.sleep(0.05)
            self._poll_link()
        self.held_s += time.monotonic() - t

    # ------------------------------------------------------------------ episodes
    def _policy_obs(self, obs: dict) -> torch.Tensor:
        """What the policy reads [1, D]: obs[obs_key], with residual followed by the base action."""
        o = obs_vector(obs, self.cfg.obs_key)
        return o if self.base is None else torch.cat([o, obs["base_action"]], -1)

    def _based(self, obs: dict, fresh: bool = False) -> dict:
        """residual: obs with its base action (the chunk's next one, or with fresh a new plan's first)."""
        if self.base is None:
            return obs
        return {**obs, "base_action": self.base.plan(obs) if fresh else self.base.next(obs)}

    def _act(self, o: torch.Tensor, deterministic: bool) -> torch.Tensor:
        with torch.no_grad():
            if deterministic:
                a, _ = self.policy.sample(o, deterministic=True)
            else:
                mean, log_std = self.policy.dist(o)
                a = torch.tanh(mean + log_std.exp() * torch.randn(mean.shape, generator=self.gen))
        return a

    def episode(self, obs: dict, index: int | None, deterministic: bool = False) -> tuple[dict, dict[str, Any]]:
        """Run one episode from obs. index None: an evaluation (no operator, not recorded, not
        streamed). Returns the next episode's first observation and the episode's summary;
        raises EnvError (the episode so far recorded) when the robot fails or is e-stopped."""
        steps, success, label = [], False, None
        started = time.monotonic()  # labels given before this belong to an earlier episode
        judged = isinstance(self.env, SimRobot) and self.env.success_fn is not None and index is not None
        if isinstance(self.env, SimRobot):  # the in-process twin with a classifier: it judges training episodes
            self.env.judging = judged
        twin_step = None  # judged: the first step the twin itself was in success
        H, A = self.cfg.sac.chunk, self.cfg.robot.action_dim
        plan, pending = None, []  # sac.chunk: the policy's chunk [H, A] and the one-step transitions executed of it
        if self.base is not None:
            self.base.reset()
            obs = self._based(obs)
        try:
            while True:
                if index is not None:
                    self._poll_link()
                    self._hold_for_learner()
                o = self._policy_obs(obs)
                if not pending:  # a new chunk (every step with single actions), executed open loop
                    plan = self._act(o, deterministic).reshape(H, A)
                r = a = plan[len(pending)][None]  # r: what the policy learns from (residual: the residual)
                if self.base is not None:
                    a = compose(obs["base_action"], r, self.cfg.residual.scale)
                manual = self.teleop.action() if (self.teleop is not None and index is not None) else None
                if manual is not None:
                    r = a = torch.as_tensor(manual, dtype=torch.float32)[None]
                    if self.base is not None:
                        r = residual_of(a, obs["base_action"], self.cfg.residual.scale)
                js = self.env._js.latest() if isinstance(self.env, RobotEnv) else None
                res = self.env.step(a)
                step = len(steps)
                if js is not None and index is not None:  # timing of training steps
                    self.latency.append(self.env.last_command_time - js.recv_time)
                    self.sent_at.append(self.env.last_command_time)
                self.robot_steps += 1
                self.train_steps += index is not None
                if self.labels is not None and index is not None and not bool(res.done[0]):
                    label = self._apply_label(res, started) or label
                done = bool(res.done[0])
                if self.base is not None and done:  # the critic's next observation carries b as acted
                    res.final_obs = self._based(res.final_obs, fresh=True)
                elif self.base is not None:
                    res.obs = self._based(res.obs)
                success = bool(res.info["success"][0])
                if judged and twin_step is None and bool(res.info["twin_success"][0]):
                    twin_step = len(steps)
                nxt = (res.final_obs if done else res.obs)
                steps.append({"obs": obs, "action": a[0], "reward": res.reward[0], "success": res.info["success"][0],
                              "intervened": manual is not None, "version": self.version})
                if success and self.cfg.actor.keep_success_frame:  # the success state, for `embodied reward train`
                    frame = res.final_obs
                    if index is not None:
                        frame = self._past_success(frame, steps)
                    steps.append({"obs": frame, "action": torch.zeros_like(a[0]), "reward": torch.tensor(0.0),
                                  "success": torch.tensor(True), "intervened": False, "version": self.version})
                pending.append({"obs": o[0], "action": r[0], "reward": res.reward[0].float(),
                                "next_obs": self._policy_obs(nxt)[0] if index is not None else None,
                                "terminated": float(res.terminated[0]), "intervened": float(manual is not None),
                                "version": float(self.version), "episode": index, "step": step})
                if len(pending) == H or done:  # the chunk's transition: what was executed of it
                    if index is not None:
                        t = chunk_transition(pending, H, self.cfg.sac.gamma)
                        self.memory.setdefault(index, []).append(t)
                        self.link.send(("transition", to_wire(t)))
                        if self.cfg.actor.lockstep:
                            self._wait_synced((index, t["step"]))
                    pending = []
                if done and not getattr(self.env, "autoreset", True):
                    res.obs, _ = self.env.reset()  # after the frames past a success
                obs = res.obs
                if done:
                    break
        finally:
            if index is not None and steps:
                self._record(steps)
        n_iv = sum(s["intervened"] and not s.get("past_success", False) for s in steps)
        n = sum(not s.get("past_success", False) for s in steps)  # steps acted within the episode
        n -= success and self.cfg.actor.keep_success_frame
        truth = {"twin_success": twin_step is not None, "twin_success_step": twin_step} if judged else {}
        return obs, {"success": success, "steps": n, "interventions": n_iv, "intervention_rate": n_iv / max(n, 1),
                     **({"label": label} if label else {}), **truth}

    def _past_success(self, frame: dict, steps: list[dict]) -> dict:
        """actor.frames_after_success: act that many steps past a success of a training episode
        (the operator's action while in control, else the policy's deterministic one) and record
        each frame as a success state: more positives for the success classifier, as LeRobot's
        number_of_steps_after_success. They are not transitions (the episode ended at the
        success). Returns the last frame."""
        for _ in range(self.cfg.actor.frames_after_success):
            manual = self.teleop.action() if self.teleop is not None else None
            if manual is not None:
                a = torch.as_tensor(manual, dtype=torch.float32)[None]
            else:
                a = self._act(self._policy_obs(frame), deterministic=True)[:, :self.cfg.robot.action_dim]
                if self.base is not None:
                    a = compose(frame["base_action"], a, self.cfg.residual.scale)
            nxt = self._based(self.env.step_past_end(a), fresh=True)
            self.robot_steps += 1
            self.train_steps += 1
            steps.append({"obs": frame, "action": a[0], "reward": torch.tensor(0.0), "success": torch.tensor(True),
                          "intervened": manual is not None, "version": self.version, "past_success": True})
            frame = nxt
        return frame

    def _apply_label(self, res: Any, since: float) -> str | None:
        """The operator's label since the episode started ends it here: "success" as a success
        (reward 1, terminated), "failure" and "reset" as truncated; the robot is reset."""
        label = self.labels.take(since)
        if label is None:
            return None
        won = label == "success"
        res.final_obs = res.obs
        res.reward, res.info["success"] = torch.tensor([float(won)]), torch.tensor([won])
        res.terminated, res.truncated = torch.tensor([won]), torch.tensor([not won])
        if getattr(self.env, "autoreset", True):
            res.obs, _ = self.env.reset()
        log.info("actor: the operator's label ends the episode: %s", label)
        return label

    def _record(self, steps: list[dict]) -> None:
        ep: dict[str, torch.Tensor] = {}
        for k in steps[0]["obs"]:
            if torch.is_tensor(steps[0]["obs"][k]):
                name = "base_action" if k == "base_action" else f"obs.{k}"  # complementary_info.base_action
                ep[name] = torch.cat([s["obs"][k] for s in steps])
        ep["action"] = torch.stack([s["action"] for s in steps])
        ep["reward"] = torch.stack([s["reward"] for s in steps]).float()
        ep["success"] = torch.stack([s["success"] for s in steps]).bool()
        ep["intervened"] = torch.tensor([s["intervened"] for s in steps])
        ep["weight_version"] = torch.tensor([float(s["version"]) for s in steps])
        self.writer.add(ep, steps[0]["obs"]["instruction"][0], None)

    def evaluate(self, obs: dict) -> tuple[dict, float]:
        """Held-out seeds, deterministic actions; returns the next training obs and the success rate."""
        wins = 0
        for i in range(self.cfg.actor.eval_episodes):
            o, _ = self.env.reset(seed=self.cfg.actor.eval_seed + i)
            obs, summary = self.episode(o, None, deterministic=True)
            wins += summary["success"]
        return obs, wins / max(self.cfg.actor.eval_episodes, 1)

    def log(self, **row: Any) -> None:
        hz = self.cfg.actor.nominal_hz or self.cfg.robot.control_hz
        row.update(version=self.version, robot_steps=self.robot_steps, robot_time_s=round(self.robot_steps / hz, 2),
                   train_steps=self.train_steps, train_time_s=round(self.train_steps / hz, 2),
                   wall_s=round(time.monotonic() - self.t0, 2))
        self._progress.write(json.dumps(row) + "\n")
        self._progress.flush()

    # ------------------------------------------------------------------ the run
    def run(self) -> dict[str, Any]:
        a = self.cfg.actor
        first = self.writer.info["total_episodes"]
        ended, code, evals = "episodes", 0, []
        stopping = stoppable("this episode")
        self.stop = stopping.__enter__()
        try:
            if isinstance(self.env, RobotEnv):  # before the first reset: the robot gives what the policies read
                self._check_robot(self.env)
            obs, _ = self.env.reset()
            if self.base is not None:
                self.base.check(obs)  # the VLA's cameras and image size against the robot's: one line
            if a.eval_every and first == 0:
                obs, rate = self.evaluate(obs)
                evals.append(rate)
                self.log(kind="eval", episode=0, success=rate)
            bar = tqdm(total=a.episodes, initial=first, unit="episode", dynamic_ncols=True, desc="finetune-robot",
                       disable=not self.cfg.actor.progress)
            recent: list[bool] = []
            for index in range(first, a.episodes):
                if self.stop:  # a signal: end after the last whole episode (embodied/stop.py)
                    ended, code = signal.Signals(self.stop.signum).name, 128 + self.stop.signum
                    break
                obs, summary = self.episode(obs, index)
                self.link.send(("episode", {"episode": index, **summary}))
                self.log(kind="episode", episode=index + 1, **summary)
                recent = (recent + [bool(summary.get("success"))])[-20:]
                bar.update(1)
                bar.set_postfix(success_last_20=f"{sum(recent) / len(recent):.2f}", version=self.version, refresh=False)
                if a.eval_every and (index + 1) % a.eval_every == 0:
                    obs, rate = self.evaluate(obs)
                    evals.append(rate)
                    self.log(kind="eval", episode=index + 1, success=rate)
                    bar.write(f"episode {index + 1}: held-out success {rate:.2f}")
            bar.close()
        except EnvError as e:
            from robot_bridge.robot_check import RobotMismatch

            estop = self.env.safety is not None and self.env.safety.estopped
            # 2: the robot cannot feed the policy (bad input, found before the first reset)
            ended, code = ("e-stop", 0) if estop else (str(e).splitlines()[0], 2 if isinstance(e, RobotMismatch) else 1)
            if code == 1:
                log.error("actor: %s", ended)
            elif code == 0:
                log.warning("actor: e-stop: run ended, episodes recorded")
        finally:
            stopping.__exit__(None, None, None)
            self.link.stop_listening()  # a learner that connected as the run ended still gets
            self._poll_link()  # the episodes it lacks (its hello answered), then the stop
            self.link.send(("stop", ended))
            self.link.close()
            self._progress.close()
        return {**self.timing(), "ended": ended, "exit_code": code, "episodes": self.writer.info["total_episodes"],
                "robot_steps": self.robot_steps, "version": self.version, "evals": evals,
                "held_s": round(self.held_s, 2), "safety": dict(self.env.safety.counts) if self.env.safety else {}}

    def timing(self) -> dict[str, float]:
        """Achieved command rate within episodes (median period) and the action latency: from
        the newest joint state's arrival to the command's publication (policy, operator, safety
        and pacing included)."""
        if len(self.latency) < 2:
            return {}
        gaps = np.diff(self.sent_at)
        gaps = gaps[gaps < 5.0 / self.cfg.robot.control_hz]  # episode boundaries (resets) left out
        lat = np.asarray(self.latency) * 1e3
        return {"control_hz": round(float(1.0 / np.median(gaps)), 2) if len(gaps) else None,
                "latency_ms_p50": round(float(np.percentile(lat, 50)), 2),
                "latency_ms_p99": round(float(np.percentile(lat, 99)), 2)}

    def close(self) -> None:
        self.env.close()
