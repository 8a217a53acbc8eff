"""One LIBERO env in its own interpreter (.venv-libero: robosuite 1.4, mujoco 3, LIBERO).

LIBERO pins mujoco < 4 and robosuite 1.4.0, so it cannot live in the project's venv; each env
of a LiberoVecEnv (sims/libero/env.py) is one of these processes. This file imports only the
standard library, numpy and LIBERO: never the project.

Usage: python worker.py --suite libero_spatial --task 3 [--height 128 --width 128
       --cameras agentview,robot0_eye_in_hand --settle 10]
The loop, the framing and the shared memory are sims/sidevenv/worker.py's (E = 1 env here):
  obs      float64 [1, 14 + D]    eef pos (3), eef axis-angle (3), gripper qpos (2), the positions
                                  of the two objects of the first goal predicate ("on bowl plate":
                                  the bowl, then the plate; zeros if none), the flat MuJoCo state
                                  (time, qpos, qvel)
  images   uint8   [1, C, H, W, 3]   the --cameras in order, upright (rotated 180 degrees)
The hello frame adds sim_dim D, task_index, task_name, instruction, num_init_states, control_hz.
Requests beyond the base's:
  reset: "layouts": "official" -> seed s starts from official init state s mod 50 (soft reset,
         gripper action zeroed, set_init_state), then `settle` no-op steps; "hard": true rebuilds
         the model first, as LIBERO's default hard_reset does (the reference for the soft one);
         "sampled" -> a new layout from LIBERO's placement samplers seeded with s mod 2^32
  step: "dense": true -> the reward is the dense one below, else 1 on success
Dense reward (libero_spatial's pick-and-place goals, "on OBJECT TARGET"): success (1) plus the
change of a staged potential phi in [0, 1] over the step, phi = (reach + max(grasp, over) +
max(lift, over) + max(lift, over) * over) / 4 from the sim state: reach = 1 - tanh(10 d), d the
hand's distance to the object's rim grasp points (RIM from the origin in xy, GRASP_Z above it);
grasp = both finger pads touch the object (robosuite's _check_grasp); lift = the object's rise
since the episode started over LIFT_FULL, clipped to [0, 1]; over = 1 - tanh(10 x the object's
xy distance to the target). Once the object is over the target, `over` stands in for grasp and
lift, so that lowering and releasing it there (the last stage) does not lower phi.
Shaping by a potential difference sums to phi(last) - phi(first) over an episode, so the policy
that succeeds is still the best one; phi is part of get_state / set_state.
Each env's state (get_state / set_state): {"sim": [D], "warm": [nv], "grip": [g], "timestep": t,
"phi": p, "z0": z}.
  {"op": "potential"} -> {"ok": true, "phi": p, "terms": {reach, grasp, lift, over}, "last": the
                          potential the last reward used} (a check; step computes it without
                          the mj_forward that writing the observation does, one substep behind)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for sims/sidevenv/worker.py (stdlib + numpy)
from sims.sidevenv.worker import SideWorker, serve  # noqa: E402

CAMERAS = ("agentview", "robot0_eye_in_hand")  # LIBERO's two cameras
NOOP = np.array([0, 0, 0, 0, 0, 0, -1], dtype=np.float64)  # the eval scripts' settle action
RIM, GRASP_Z = 0.052, 0.035  # m: the rim grasp point of a bowl, from its origin (sims/libero/expert.py)
LIFT_FULL = 0.05  # m: a rise of the object that counts as fully lifted


def quat_to_axis_angle(q: np.ndarray) -> np.ndarray:
    """xyzw quaternion [4] -> axis * angle [3] (the LIBERO eval scripts' convention)."""
    w = float(np.clip(q[3], -1.0, 1.0))
    den = np.sqrt(1.0 - w * w)
    if np.isclose(den, 0.0):
        return np.zeros(3)
    return q[:3] * 2.0 * np.arccos(w) / den


class Worker(SideWorker):
    def __init__(self, suite: str, task: str, height: int, width: int, cameras: list[str], settle: int):
        from libero.libero import benchmark
        from libero.libero.envs.env_wrapper import ControlEnv

        suites = benchmark.get_benchmark_dict()
        if suite not in suites:
            raise ValueError(f"unknown suite {suite!r}; allowed: {', '.join(sorted(suites))}")
        bench = suites[suite]()
        names = bench.get_task_names()
        idx = int(task) if task.isdigit() else (names.index(task) if task in names else -1)
        if not 0 <= idx < len(names):
            raise ValueError(f"unknown task {task!r} in {suite}: use an index in [0, {len(names)}) or a task name")
        self.task = bench.get_task(idx)
        self.init_states = np.asarray(bench.get_task_init_states(idx), np.float64)  # [N, D]
        self.env = ControlEnv(bddl_file_name=bench.get_task_bddl_file_path(idx), use_camera_obs=False,
                              has_offscreen_renderer=bool(cameras), hard_reset=False, ignore_done=True,
                              camera_heights=height, camera_widths=width)
        self.env.reset()
        bad = [c for c in cameras if c not in CAMERAS]
        if bad:
            raise ValueError(f"unknown camera {bad[0]!r}; allowed: {', '.join(CAMERAS)}")
        self.h, self.w, self.cameras, self.settle = height, width, list(cameras), settle
        self.dim = self.env.get_sim_state().shape[0]
        self.goal_bodies = self._goal_bodies()
        self.phi, self.z0 = 0.0, 0.0  # dense reward: the last potential, the object's start height
        self.make_memory(1, 14 + self.dim, len(cameras), height, width)
        self.info = {"sim_dim": self.dim, "task_index": idx,
                     "task_name": self.task.name, "instruction": self.task.language,
                     "bddl_instruction": self.env.language_instruction, "num_init_states": len(self.init_states),
                     "cameras": self.cameras, "control_hz": float(self.env.env.control_freq)}

    def _goal_bodies(self) -> list[int]:
        """Body ids of the (up to two) objects named by the first goal predicate; a region
        ("basket_1_contain_region") counts as its object."""
        env = self.env.env
        goal = env.parsed_problem["goal_state"]
        ids = []
        self.pick = None  # the goal's first object (a MujocoObject), for the grasp check
        for name in (goal[0][1:3] if goal else []):
            obj = next((o for o in env.obj_body_id if name == o or name.startswith(o + "_")), None)
            if obj is not None:
                ids.append(env.obj_body_id[obj])
                if self.pick is None and len(ids) == 1:
                    self.pick = env.objects_dict.get(obj)
        return ids

    def potential(self) -> tuple[float, dict]:
        """The dense reward's staged potential phi in [0, 1] of the current sim state, with its
        terms; 0 when the goal names fewer than two objects."""
        if len(self.goal_bodies) < 2:
            return 0.0, {}
        d, robot = self.env.sim.data, self.env.robots[0]
        hand = np.asarray(d.site_xpos[robot.eef_site_id])
        obj, target = np.asarray(d.body_xpos[self.goal_bodies[0]]), np.asarray(d.body_xpos[self.goal_bodies[1]])
        rim = np.hypot(np.linalg.norm(hand[:2] - obj[:2]) - RIM, hand[2] - obj[2] - GRASP_Z)
        terms = {"reach": 1.0 - np.tanh(10.0 * rim),
                 "grasp": float(self.pick is not None and self.env.env._check_grasp(self.gripper, self.pick)),
                 "lift": float(np.clip((obj[2] - self.z0) / LIFT_FULL, 0.0, 1.0)),
                 "over": 1.0 - np.tanh(10.0 * np.linalg.norm(obj[:2] - target[:2]))}
        over = terms["over"]
        lift = max(terms["lift"], over)  # over the target, lowering it is the next stage, not a loss
        phi = (terms["reach"] + max(terms["grasp"], over) + lift + lift * over) / 4.0
        return float(phi), terms

    @property
    def gripper(self):
        return self.env.robots[0].gripper

    def potential_op(self, req: dict) -> dict:
        phi, terms = self.potential()
        return {"ok": True, "phi": phi, "terms": terms, "last": self.phi}

    def _write(self) -> None:
        """Observation of the current sim state into shared memory. Read from the sim itself (as
        robosuite's eef_pos / eef_quat / gripper_qpos sensors do) after mj_forward, not from the
        observables, whose sampling clocks are not part of the restorable state."""
        sim, robot = self.env.sim, self.env.robots[0]
        sim.forward()  # positions of the current qpos (mj_step leaves them one substep behind)
        xyzw = np.roll(np.asarray(sim.data.get_body_xquat(robot.robot_model.eef_name)), -1)
        row = self.obs[0]
        row[:3] = np.float32(sim.data.site_xpos[robot.eef_site_id])  # float32 values, as the state has
        row[3:6] = np.float32(quat_to_axis_angle(xyzw))
        row[6:8] = np.float32(sim.data.qpos[robot._ref_gripper_joint_pos_indexes])
        row[8:14] = 0.0
        for k, b in enumerate(self.goal_bodies):
            row[8 + 3 * k:11 + 3 * k] = np.float32(sim.data.body_xpos[b])
        row[14:] = self.env.get_sim_state()

    def render_env(self, j: int) -> None:
        for c, cam in enumerate(self.cameras):
            img = self.env.sim.render(camera_name=cam, width=self.w, height=self.h)
            self.images[0, c] = img[::-1, ::-1]  # OpenGL rows start at the bottom: rotate 180

    def reset_env(self, j: int, seed: int, req: dict) -> None:
        if req.get("layouts", "official") == "sampled":
            np.random.seed(seed % 2**32)  # robosuite's placement samplers use np.random
            self.env.reset()
            self.gripper.current_action = np.zeros_like(self.gripper.current_action)
            self.env.regenerate_obs_from_state(self.env.get_sim_state())
        else:
            i = seed % len(self.init_states)
            if req.get("hard"):  # the official protocol: rebuild the model (seconds; for checks)
                self.env.env.hard_reset = True
                try:
                    self.env.reset()
                finally:
                    self.env.env.hard_reset = False
            else:
                self.env.reset()  # soft: hard_reset=False keeps the model and the GL context
                self.gripper.current_action = np.zeros_like(self.gripper.current_action)
            self.env.set_init_state(self.init_states[i])
        for _ in range(self.settle):
            self.env.step(NOOP)
        self.env.env.timestep = 0
        self._write()  # its mj_forward also serves the potential
        self.z0 = float(self.env.sim.data.body_xpos[self.goal_bodies[0]][2]) if self.goal_bodies else 0.0
        self.phi = self.potential()[0]

    def step_env(self, j: int, actions: np.ndarray, req: dict) -> tuple[list[bool], list[float], dict]:
        dense = bool(req.get("dense", False))
        success: list[bool] = []
        reward: list[float] = []
        for a in actions.reshape(-1, 7):
            _, _, done, _ = self.env.step(a)
            success.append(bool(done))  # LIBERO's done is check_success()
            if dense:
                phi = self.potential()[0]
                reward.append(float(done) + phi - self.phi)
                self.phi = phi
            else:
                reward.append(float(done))
            if done:
                break
        if success:
            self._write()
        return success, reward, {}

    def get_env_state(self, j: int) -> dict:
        d = self.env.sim.data
        return {"sim": self.env.get_sim_state().tolist(), "warm": np.asarray(d.qacc_warmstart).tolist(),
                "grip": np.asarray(self.gripper.current_action).tolist(), "timestep": int(self.env.env.timestep),
                "phi": self.phi, "z0": self.z0}

    def set_env_state(self, j: int, st: dict) -> None:
        self.gripper.current_action = np.asarray(st["grip"], np.float64)
        self.env.regenerate_obs_from_state(np.asarray(st["sim"], np.float64))
        self.env.sim.data.qacc_warmstart[:] = np.asarray(st["warm"], np.float64)
        self.env.env.timestep = int(st["timestep"])
        self.phi, self.z0 = float(st.get("phi", 0.0)), float(st.get("z0", 0.0))
        self._write()

    def ops(self) -> dict:
        return {**super().ops(), "potential": self.potential_op}

    def close_envs(self) -> None:
        self.env.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--suite", required=True)
    p.add_argument("--task", required=True)
    p.add_argument("--height", type=int, default=128)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--cameras", default="", help="comma-separated camera names; empty: state only")
    p.add_argument("--settle", type=int, default=10)
    serve(p, lambda a: Worker(a.suite, a.task, a.height, a.width, [c for c in a.cameras.split(",") if c], a.settle))


if __name__ == "__main__":
    main()
