"""Where a state world model's closed loop departs from the simulator's (issue 22), on PushCube.

Each checkpoint's deterministic policy plays the same starts (evaluation seeds 1_000_000 + i)
in the simulator and in the model (from the simulator's initial privileged vectors, with the
task's check on the decoded state as success). From the privileged vectors of both:
- success, how far the cube travels in the plane over the episode, and where it ends relative
  to the goal (medians: how far past it along the line from the cube's start, how far beside it);
- how far the vector's own "cube - gripper" field is from its cube minus its gripper (median
  over the states reached; 0 in the simulator, and in a model with `consistent: true`);
- "pushes without contact": of the steps in which the cube starts to move (under 0.5 mm in the
  step before, over 2 mm in this one), the fraction in which the gripper is clear of it: its
  centre more than 1 cm beyond the distance at which a finger (at the gripper's opening) can
  touch a corner of the cube, or more than 2 cm above the cube's top;
- one step of the model from each of the simulator's own states under the simulator's own
  actions (teacher forcing; the members' mean): the cube's predicted displacement where the
  simulator's cube stays (< 0.5 mm: motion the model invents) and where it moves (predicted
  over real displacement, along the real direction, and the angle between them), and how far
  decode(encode(x)) puts the cube and the gripper from where they are (the reconstruction's error).

  python benchmarks/bench_world_model_closed_loop.py --wm runs/wm --checkpoints runs/ppo/checkpoints/iter_000010 \\
      runs/ppo/checkpoints/iter_000040 --seeds 128 [--rollout members] --out closed_loop.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from wm_episodes import load_policy, sim_starts

MOVED, STILL = 0.002, 0.0005  # m: the cube moved in a step / stayed


def clear_of_cube(x: np.ndarray) -> np.ndarray:
    """[..., P] privileged vectors -> bool [...]: the gripper cannot be touching the cube."""
    from sims.mujoco.scene import CUBE_HALF
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.mujoco.tasks.push_cube import FINGER_THICK

    tcp, cube, gap = x[..., L["tcp"]], x[..., L["cube"]], x[..., L["gap"]][..., 0]
    reach = CUBE_HALF * np.sqrt(2) + np.maximum(gap, 0) / 2 + FINGER_THICK + 0.01
    above = tcp[..., 2] > cube[..., 2] + CUBE_HALF + 0.02
    return (np.linalg.norm(tcp[..., :2] - cube[..., :2], axis=-1) > reach) | above


@torch.no_grad()
def play(env, policy, obs) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One episode per env row: (privileged [N, T+1, P], actions [N, T, A], alive [N, T] (step t
    belongs to the episode), success [N]); a row's steps after its episode ended are masked."""
    N, T = env.num_envs, env.spec.max_episode_steps
    xs, acts, alive = [obs["privileged"].clone()], [], []
    live, succ = torch.ones(N, dtype=torch.bool), torch.zeros(N, dtype=torch.bool)
    for _ in range(T):
        a = policy.act(obs, deterministic=True).actions[:, 0]
        res = env.step(a)
        nxt = res.obs["privileged"].clone()
        if res.final_obs is not None:
            nxt[res.done] = res.final_obs["privileged"][res.done]
        xs.append(nxt)
        acts.append(a)
        alive.append(live.clone())
        succ |= live & res.info["success"]
        live &= ~res.done
        obs = res.obs
        if not live.any():
            break
    return (torch.stack(xs, 1).numpy(), torch.stack(acts, 1).numpy(), torch.stack(alive, 1).numpy(),
            succ.numpy())


def closed_loop_stats(x: np.ndarray, alive: np.ndarray, succ: np.ndarray) -> dict:
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L

    cube = x[..., L["cube"]][..., :2]
    step = np.linalg.norm(cube[:, 1:] - cube[:, :-1], axis=-1)  # [N, T]
    starts = np.zeros_like(alive)
    starts[:, 1:] = (step[:, :-1] < STILL) & (step[:, 1:] > MOVED) & alive[:, 1:]
    clear = clear_of_cube(x[:, :-1])
    last = alive.sum(1)  # the index of each episode's last state
    end = cube[np.arange(len(x)), last]
    travel = np.linalg.norm(end - cube[:, 0], axis=-1)
    goal = x[:, 0, L["goal"]][:, :2]  # the cube's end relative to the goal, along and across
    u = (goal - cube[:, 0]) / np.linalg.norm(goal - cube[:, 0], axis=1, keepdims=True)  # the line to it
    off = end - goal
    along, across = (off * u).sum(1), np.abs(off[:, 0] * u[:, 1] - off[:, 1] * u[:, 0])
    live = x[:, 1:][alive]  # [S, P]: the states the episodes reached
    mismatch = np.linalg.norm(live[:, L["cube_minus_tcp"]] - (live[:, L["cube"]] - live[:, L["tcp"]]), axis=1)
    return {"success": float(succ.mean()), "cube_travel_m": float(travel.mean()),
            "cube_minus_tcp_mismatch_m": float(np.median(mismatch)),
            "end_past_goal_m": float(np.median(along)), "end_beside_goal_m": float(np.median(across)),
            "steps": int(alive.sum()), "pushes": int(starts.sum()),
            "pushes_without_contact": float((starts & clear).sum() / max(starts.sum(), 1))}


@torch.no_grad()
def teacher_forced(wm_env, x: np.ndarray, a: np.ndarray, alive: np.ndarray) -> dict:
    """One model step from each of the simulator's states [N, T+1, P] under its actions [N, T, A]."""
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.world_model.rollout import encode_raw, mean_step

    model = wm_env.model
    m = alive.reshape(-1)
    xt = torch.from_numpy(x[:, :-1].reshape(-1, x.shape[-1])[m])
    at = torch.from_numpy(a.reshape(-1, a.shape[-1])[m])
    real = x[:, 1:].reshape(-1, x.shape[-1])[m][:, L["cube"]][:, :2] - xt.numpy()[:, L["cube"]][:, :2]
    z = encode_raw(model, xt)
    rec = model.denormalize(model.decode(z)).numpy()
    pred_x = mean_step(model, z, at)["x"].numpy()
    pred = pred_x[:, L["cube"]][:, :2] - xt.numpy()[:, L["cube"]][:, :2]
    still, moved = np.linalg.norm(real, axis=1) < STILL, np.linalg.norm(real, axis=1) > MOVED
    unit = real[moved] / np.linalg.norm(real[moved], axis=1, keepdims=True)
    gain = (pred[moved] * unit).sum(1) / np.linalg.norm(real[moved], axis=1)
    cross = pred[moved][:, 0] * unit[:, 1] - pred[moved][:, 1] * unit[:, 0]
    angle = np.degrees(np.abs(np.arctan2(cross, (pred[moved] * unit).sum(1))))  # direction's error
    invented = np.linalg.norm(pred[still], axis=1)
    x_now = xt.numpy()
    rec_cube = np.linalg.norm(rec[:, L["cube"]][:, :2] - x_now[:, L["cube"]][:, :2], axis=1)
    rec_tcp = np.linalg.norm(rec[:, L["tcp"]] - x_now[:, L["tcp"]], axis=1)
    return {"steps_still": int(still.sum()), "steps_moved": int(moved.sum()),
            "invented_motion_mm": float(invented.mean() * 1000) if still.any() else None,
            "invented_over_2mm": float((invented > MOVED).mean()) if still.any() else None,
            "moved_gain": float(np.median(gain)) if moved.any() else None,
            "moved_angle_deg": float(np.median(angle)) if moved.any() else None,
            "reconstruction_cube_mm": float(rec_cube.mean() * 1000),
            "reconstruction_tcp_mm": float(rec_tcp.mean() * 1000)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wm", required=True)
    p.add_argument("--checkpoints", nargs="+", required=True, help="checkpoint folders of state policies")
    p.add_argument("--seeds", type=int, default=128)
    p.add_argument("--rollout", default="mean", choices=["mean", "members"])
    p.add_argument("--out", required=True)
    args = p.parse_args()

    from embodied.run.env import eval_seeds
    from sims.registry import make_env
    from sims.world_model.env import WorldModelVecEnv

    torch.set_num_threads(1)
    wm_env = WorldModelVecEnv(args.wm, args.seeds, reward_mode="task", rollout=args.rollout)
    task = wm_env.cfg.task
    if task != "PushCube":
        raise SystemExit(f"--wm: models {task}; this diagnostic reads PushCube's privileged layout")
    seeds = eval_seeds(args.seeds)
    starts, instr = sim_starts(task, seeds)
    rows = []
    for ckpt in map(Path, args.checkpoints):
        policy = load_policy(ckpt)
        sim = make_env(task, args.seeds, num_threads=1)
        xs, acts, alive, succ = play(sim, policy, sim.reset(seed=seeds)[0])
        sim.close()
        xm, _, alive_m, succ_m = play(wm_env, policy, wm_env.reset_to(starts, instr)[0])
        rows.append({"checkpoint": f"{ckpt.parent.parent.name}/{ckpt.name}",
                     "sim": closed_loop_stats(xs, alive, succ), "model": closed_loop_stats(xm, alive_m, succ_m),
                     "teacher_forced": teacher_forced(wm_env, xs, acts, alive)})
        print(json.dumps(rows[-1]), flush=True)
    Path(args.out).write_text(json.dumps({"wm": args.wm, "rollout": args.rollout, "seeds": args.seeds,
                                          "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
