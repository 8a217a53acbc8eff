"""mplib motion-planning worker: runs in its own interpreter (.venv-mplib, numpy 1.26 + mplib 0.2.1).

mplib's wheels are built against numpy 1.x and crash under numpy 2 (the project's numpy), so
the planner lives in a separate small venv and talks to `sims/maniskill/planner.py` over
stdin/stdout. This file imports only the standard library, numpy and mplib: never the project.

Usage: python mplib_worker.py --urdf PANDA.urdf --srdf PANDA.srdf [--move-group panda_hand_tcp]
       [--table-z 0.0]
The Planner is built once; then each request is one frame on stdin and gets one frame back on
stdout. Frame: 4-byte big-endian length, then that many bytes of UTF-8 JSON (an object).

Requests (poses are [x, y, z, qw, qx, qy, qz] in the world frame, qpos is the full robot qpos,
arm joints then fingers: [9] for the Panda):
  {"op": "ping"}                         -> {"ok": true, "versions": {...}, "dof": 7}
  {"op": "fk", "qpos": [9]}              -> {"ok": true, "pose": [7]}  (move-group link, base frame)
  {"op": "plan", "qpos": [9], "goal": [7], "base": [7],
   "method": "screw" | "pose" | "auto", "time_step": dt, "vel": rad/s, "acc": rad/s^2,
   "planning_time": s, "seed": int}
      -> {"ok": true, "path": [[7] x T], "method": ...}: arm joint positions sampled every
         dt seconds along a time-optimal parameterisation (TOPP-RA) under |qdot| <= vel and
         |qddot| <= acc per joint; path[0] is the start, path[-1] reaches the goal pose (checked
         by forward kinematics: within "pos_tol" m, default 0.01, and "rot_tol" rad, 0.05).
      -> {"ok": false, "reason": "..."} when IK, the screw motion or RRT fail.
     "screw": straight-line (screw) motion of the link; "pose": IK then RRTConnect in joint
     space (collision-checked against the robot itself and the table); "auto": screw, then pose.
  {"op": "quit"}                         -> the worker exits
Anything mplib prints goes to stderr; stdout carries only frames.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for sims/frames.py (standard library only)
from sims.frames import leave_stop_to_parent, read_frame, write_frame  # noqa: E402


class Worker:
    def __init__(self, urdf: str, srdf: str, move_group: str, table_z: float | None):
        import mplib

        self.mplib = mplib
        self.planner = mplib.Planner(urdf=urdf, srdf=srdf, move_group=move_group)
        self.dof = len(self.planner.move_group_joint_indices)
        self.link = self.planner.link_name_2_idx[move_group]
        if table_z is not None:  # the table as a thin box whose top is at z = table_z (world)
            from mplib.collision_detection import fcl

            box = fcl.CollisionObject(fcl.Box(4.0, 4.0, 0.1))
            self.planner.planning_world.add_object(
                fcl.FCLObject("table", mplib.Pose(p=[0.0, 0.0, table_z - 0.05]), [box], [mplib.Pose()]))

    def _pose(self, v: list[float]):
        return self.mplib.Pose(p=np.asarray(v[:3], np.float64), q=np.asarray(v[3:7], np.float64))

    def fk(self, req: dict) -> dict:
        model = self.planner.pinocchio_model
        model.compute_forward_kinematics(np.asarray(req["qpos"], np.float64))
        pose = model.get_link_pose(self.link)
        return {"ok": True, "pose": [*map(float, pose.p), *map(float, pose.q)]}

    def plan(self, req: dict) -> dict:
        p = self.planner
        qpos = np.asarray(req["qpos"], np.float64)
        goal = self._pose(req["goal"])
        p.set_base_pose(self._pose(req["base"]))
        p.joint_vel_limits = np.full(self.dof, float(req.get("vel", 1.0)))
        p.joint_acc_limits = np.full(self.dof, float(req.get("acc", 1.0)))
        dt = float(req.get("time_step", 0.1))
        if "seed" in req:
            self.mplib.set_global_seed(int(req["seed"]))
        method = req.get("method", "auto")
        tried = ["screw", "pose"] if method == "auto" else [method]
        reasons = []
        for m in tried:
            if m not in ("screw", "pose"):
                return {"ok": False, "reason": f"unknown method {m!r}; use screw, pose or auto"}
            res = self._run(m, goal, qpos, dt, float(req.get("planning_time", 1.0)))
            if res["status"] == "Success" and len(res["position"]) < 2:
                # TOPP samples int(duration / dt) points: a short move needs a finer step to end at the goal
                res = self._run(m, goal, qpos, max(float(res["duration"]) / 2, 1e-4), 1.0)
            if res["status"] != "Success":
                reasons.append(f"{m}: {res['status']}")
                continue
            path = self._resample(res, dt)
            miss = self._miss(np.r_[path[-1], qpos[self.dof:]], goal)
            if miss[0] > float(req.get("pos_tol", 0.01)) or miss[1] > float(req.get("rot_tol", 0.05)):
                # the screw motion stops where its twist is used up, not necessarily at the goal
                reasons.append(f"{m}: ends {miss[0]:.3f} m / {miss[1]:.3f} rad from the goal")
                continue
            return {"ok": True, "path": path.tolist(), "method": m}
        return {"ok": False, "reason": "; ".join(reasons)}

    def _run(self, method: str, goal, qpos: np.ndarray, dt: float, planning_time: float) -> dict:
        if method == "screw":
            return self.planner.plan_screw(goal, qpos.copy(), time_step=dt)
        return self.planner.plan_pose(goal, qpos.copy(), time_step=dt, planning_time=planning_time)

    @staticmethod
    def _resample(res: dict, dt: float) -> np.ndarray:
        """Joint positions [T, dof] every dt seconds (and at the end): mplib samples TOPP's
        trajectory at int(duration / dt) evenly spaced times, slightly more than dt apart."""
        t, pos, dur = np.asarray(res["time"]), np.asarray(res["position"]), float(res["duration"])
        grid = np.arange(0.0, dur, dt)
        grid = np.r_[grid, dur] if dur - grid[-1] > 1e-9 else grid
        return np.stack([np.interp(grid, t, pos[:, j]) for j in range(pos.shape[1])], axis=1)

    def _miss(self, qpos: np.ndarray, goal) -> tuple[float, float]:
        """Position (m) and rotation (rad) error of the move-group link at qpos from goal (world)."""
        model = self.planner.pinocchio_model
        model.compute_forward_kinematics(qpos)
        base = self.planner.robot.get_base_pose()
        reached = base * model.get_link_pose(self.link)
        dp = float(np.linalg.norm(np.asarray(reached.p) - np.asarray(goal.p)))
        dot = abs(float(np.dot(np.asarray(reached.q), np.asarray(goal.q))))
        return dp, 2.0 * float(np.arccos(min(1.0, dot)))

    def handle(self, req: dict) -> dict:
        op = req.get("op")
        if op == "ping":
            import mplib

            return {"ok": True, "dof": self.dof,
                    "versions": {"numpy": np.__version__, "mplib": getattr(mplib, "__version__", "?")}}
        if op == "fk":
            return self.fk(req)
        if op == "plan":
            return self.plan(req)
        return {"ok": False, "reason": f"unknown op {op!r}"}


def main() -> None:
    leave_stop_to_parent()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--urdf", required=True)
    ap.add_argument("--srdf", required=True)
    ap.add_argument("--move-group", default="panda_hand_tcp")
    ap.add_argument("--table-z", type=float, default=None)
    args = ap.parse_args()
    # Frames go to the original stdout; anything else printed (mplib, OMPL, toppra) to stderr.
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    try:
        worker = Worker(args.urdf, args.srdf, args.move_group, args.table_z)
    except Exception as e:  # noqa: BLE001 - reported to the client as one line
        write_frame(out, {"ok": False, "reason": f"Planner: {type(e).__name__}: {e}".splitlines()[0]})
        return
    write_frame(out, {"ok": True, "ready": True})
    while (req := read_frame(inp)) is not None and req.get("op") != "quit":
        try:
            reply = worker.handle(req)
        except Exception as e:  # noqa: BLE001
            reply = {"ok": False, "reason": f"{type(e).__name__}: {e}".splitlines()[0]}
        write_frame(out, reply)


if __name__ == "__main__":
    main()
