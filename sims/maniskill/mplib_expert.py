"""Motion-planning experts for ManiSkill tasks: mplib joint paths executed in pd_joint_delta_pos.

At the start of each episode (`reset`, or the first call that sees an env without a plan) the
expert reads the privileged state (qpos, TCP pose, cube pose, goal) and asks the mplib worker
(sims/maniskill/planner.py) for a chain of joint paths ("legs") through the waypoints of
ManiSkill's motion-planning solutions:
  PickCube: 5 cm above a yaw-aligned top-down grasp, down to the cube, close the gripper,
            carry the cube to the goal (of the cube's four face-aligned yaws, the one whose
            first leg is quickest; the wrist turn often dominates it);
  PushCube: gripper closed, 5 cm above a point 5 cm behind the cube on the cube-goal line,
            down, push along the line until the cube is well inside the target circle.
Each leg starts where the previous one ends. Legs are screw motions (straight TCP lines) where
possible, IK + RRTConnect otherwise, time-parameterised by TOPP-RA at the 20 Hz control period
under joint speed SPEED and acceleration ACCEL, so an episode fits into its 50 control steps.

Execution is closed-loop on qpos: at step k of a leg the arm is driven toward the leg's
waypoint k+1 with action = clip(GAIN * (q_waypoint - q_now) / 0.1, -1, 1). In
pd_joint_delta_pos the joint target is q_now + 0.1 rad per unit action; measured, the joints
then move about 0.4 of that offset per step (at most ~0.04 rad per step), hence GAIN > 1 and
SPEED below 0.8 rad/s. A leg ends when its path is done and the arm is within TOL rad of its
end (or SETTLE steps later); PickCube's gripper leg ends once ManiSkill reports the cube
grasped (or after CLOSE steps).

Actions: float32 [B, 8] = 7 arm joint deltas (0.1 rad per unit), then the gripper (1 open,
-1 closed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from sims.maniskill.expert import DOWN, _tcp_yaw, state_layout
from sims.maniskill.planner import MplibPlanner
from sims.maniskill.tasks import parse_name
from sims.vecenv import EnvError

MODE = "pd_joint_delta_pos"
JOINT_STEP = 0.1  # rad per unit action (ManiSkill's Panda arm_pd_joint_delta_pos)
DT = 0.05  # control period of the tabletop tasks (20 Hz)
SPEED, ACCEL = 0.76, 10.0  # rad/s, rad/s^2 per joint (TOPP-RA): <= 0.038 rad per step
GAIN, TOL, SETTLE, CLOSE = 2.0, 0.01, 4, 6  # tracking gain, end tolerance (rad), extra steps


@dataclass
class Leg:
    path: np.ndarray  # [T, 7] arm joint positions, one per control step
    grip: float  # gripper action during the leg (1 open, -1 closed)
    until_grasped: bool = False  # hold the path's end until the cube is grasped (PickCube)


@dataclass
class Plan:
    legs: list[Leg] = field(default_factory=list)
    leg: int = 0  # current leg
    k: int = 0  # steps into the current leg
    error: str = ""  # why planning failed ("" if it did not)


def _down(yaw: float) -> np.ndarray:
    """Quaternion wxyz [4] of the TCP pointing down, turned by yaw about the world z axis."""
    x, y, z, w = (Rotation.from_euler("z", yaw) * DOWN).as_quat()
    return np.array([w, x, y, z])


class MplibExpert:
    """privileged float [B, P] -> actions float32 [B, 8] in pd_joint_delta_pos.

    reset(env_ids, privileged [n, P]) plans new episodes of envs env_ids; __call__ plans any env
    that has no plan yet. `failures` counts episodes whose planning failed (those envs hold still).
    """

    def __init__(self, env_id: str, planner: MplibPlanner | None = None, hover: float = 0.05,
                 behind: float = 0.05):
        if env_id not in WAYPOINTS:
            raise EnvError(f"expert: no motion-planning expert for ms:{env_id}; they exist for "
                           f"{', '.join('ms:' + k for k in WAYPOINTS)}")
        self.env_id, self.hover, self.behind = env_id, hover, behind
        self.planner = planner or MplibPlanner()  # first: a missing planner venv fails at once
        self.L = state_layout(env_id)
        self.plans: dict[int, Plan] = {}
        self.base: np.ndarray | None = None  # robot base pose [7] in the world (fixed per task)
        self.failures = 0

    # ------------------------------------------------------------------ planning
    def _part(self, row: np.ndarray, key: str) -> np.ndarray:
        return row[self.L[key]]

    def _chain(self, q: np.ndarray, goals: list[tuple[np.ndarray | None, float, bool]]) -> Plan:
        """Plan legs through TCP goals [(pose [7] or None: gripper only, grip, until_grasped)]
        from qpos q [9]."""
        plan, fingers = Plan(), q[7:9]
        for goal, grip, until in goals:
            if goal is None:  # a gripper-only leg: hold the last joint position
                plan.legs.append(Leg(q[None, :7], grip, until))
                continue
            path, how = self.planner.plan(q, goal, self.base, method="auto", time_step=DT, vel=SPEED,
                                          acc=ACCEL, seed=1)
            if path is None:
                return Plan(error=how)
            plan.legs.append(Leg(path, grip))
            q = np.r_[path[-1], fingers]
        return plan

    def plan_episode(self, row: np.ndarray) -> Plan:
        """The legs of one episode from its privileged row [P]."""
        q, tcp = self._part(row, "qpos").astype(np.float64), self._part(row, "tcp_pose")
        if self.base is None:
            self.base = self.planner.base_pose(q, tcp)
        # The task gives one or more alternatives (PickCube: the four face-aligned grasp yaws),
        # tried in the order of their first leg's duration.
        alts = WAYPOINTS[self.env_id](self, row)
        steps = [self._steps(q, goals[0][0]) for goals in alts] if len(alts) > 1 else [0]
        plan = Plan(error="no alternative")
        for i in np.argsort(steps, kind="stable"):
            plan = self._chain(q, alts[i])
            if not plan.error:
                return plan
        self.failures += 1
        return plan

    def _steps(self, q: np.ndarray, goal: np.ndarray) -> float:
        """Control steps of a planned motion from qpos q [9] to TCP pose goal [7] (inf if none)."""
        path, _ = self.planner.plan(q, goal, self.base, method="auto", time_step=DT, vel=SPEED, acc=ACCEL)
        return np.inf if path is None else float(len(path))

    def reset(self, env_ids, privileged: np.ndarray) -> None:
        """New episodes in envs env_ids (int [n]) with privileged rows [n, P]: plan them."""
        privileged = np.asarray(privileged, np.float64)
        for i, row in zip(np.asarray(env_ids).tolist(), privileged):
            self.plans[int(i)] = self.plan_episode(row)

    # ------------------------------------------------------------------ acting
    def __call__(self, privileged: np.ndarray) -> np.ndarray:
        privileged = np.asarray(privileged, np.float64)
        out = np.zeros((len(privileged), 8), np.float32)
        for i, row in enumerate(privileged):
            if i not in self.plans:
                self.plans[i] = self.plan_episode(row)
            out[i] = self._act(self.plans[i], row)
        return out

    def _act(self, plan: Plan, row: np.ndarray) -> np.ndarray:
        a = np.zeros(8)
        if plan.error:
            return a  # hold still: the episode fails and `collect` drops it
        q = self._part(row, "qpos")[:7]
        while True:
            leg = plan.legs[plan.leg]
            T, last = len(leg.path), plan.leg == len(plan.legs) - 1
            done_path = plan.k >= T - 1
            settled = np.abs(leg.path[-1] - q).max() < TOL or plan.k >= T - 1 + SETTLE
            if leg.until_grasped:  # closing: until the cube is held (or CLOSE steps)
                grasped = self._part(row, "is_grasped")[0] > 0.5
                finished = (plan.k >= 1 and grasped) or plan.k >= CLOSE
            else:
                finished = done_path and settled
            if not finished or last:
                break
            plan.leg, plan.k = plan.leg + 1, 0
        target = leg.path[min(plan.k + 1, T - 1)]
        a[:7] = np.clip(GAIN * (target - q) / JOINT_STEP, -1, 1)
        a[7] = leg.grip
        plan.k += 1
        return a

    def close(self) -> None:
        self.planner.close()


def pick_waypoints(ex: MplibExpert, row: np.ndarray) -> list:
    """PickCube: above the cube, at the cube, close, at the goal; the TCP points down, turned to
    one of the cube's four face-aligned yaws (one alternative each)."""
    cube, goal = ex._part(row, "obj_pose"), ex._part(row, "goal_pos")
    m = Rotation.from_quat(cube[[4, 5, 6, 3]]).as_matrix()
    cube_yaw = float(np.arctan2(m[1, 0], m[0, 0]))
    out = []
    for k in range(4):
        down = _down(cube_yaw + k * np.pi / 2)
        out.append([(np.r_[cube[:3] + [0, 0, ex.hover], down], 1.0, False),
                    (np.r_[cube[:3], down], 1.0, False),
                    (None, -1.0, True),
                    (np.r_[goal, down], -1.0, False)])
    return out


def push_waypoints(ex: MplibExpert, row: np.ndarray, half: float = 0.02, pad: float = 0.01,
                   short: float = 0.05, tilt: float = np.deg2rad(15), lift: float = 0.01) -> list:
    """PushCube: gripper closed, above a point `behind` the cube on the cube-goal line, down,
    then push until the cube's centre is `short` before the goal's (the target circle's radius
    is 0.1 m). Pointing straight down, the Panda cannot reach that far at table height, so the
    hand leans `tilt` toward the goal during the push; that screw motion dips by up to ~8 mm,
    hence the push runs `lift` above the cube's centre."""
    cube, goal, tcp = ex._part(row, "obj_pose")[:3], ex._part(row, "goal_pos"), ex._part(row, "tcp_pose")
    u = np.r_[goal[:2] - cube[:2], 0.0]
    u /= max(np.linalg.norm(u), 1e-9)
    yaw = float(_tcp_yaw(tcp[None, 3:])[0])
    lean_rot = Rotation.from_rotvec(tilt * np.array([u[1], -u[0], 0.0])) * Rotation.from_euler("z", yaw) * DOWN
    x, y, z, w = lean_rot.as_quat()
    down, lean = _down(yaw), np.array([w, x, y, z])
    low = cube + [0.0, 0.0, lift]
    pre = low - ex.behind * u
    end = np.r_[goal[:2], low[2]] - (half + pad + short) * u  # the TCP behind the cube's back face
    return [[(np.r_[pre + [0, 0, ex.hover], down], -1.0, False),
             (np.r_[pre, down], -1.0, False),
             (np.r_[end, lean], -1.0, False)]]


WAYPOINTS = {"PickCube-v1": pick_waypoints, "PushCube-v1": push_waypoints}


def expert_for(task: str) -> MplibExpert:
    """The motion-planning expert of "ms:<EnvId>@pd_joint_delta_pos" (privileged [B, P] -> [B, 8])."""
    entry, mode = parse_name(task)
    if mode != MODE:
        raise EnvError(f"expert: the mplib experts act in {MODE}: use ms:{entry.env_id}@{MODE}, not {task}")
    return MplibExpert(entry.env_id)
