"""One MetaWorld worker: several MetaWorld envs in the side venv .venv-metaworld (`make metaworld`).

Run by sims/metaworld/env.py (through sims/sidevenv/proc.py) as `.venv-metaworld/bin/python
sims/metaworld/worker.py --tasks pick-place-v3,reach-v3 ...`; it imports only the standard
library, numpy, mujoco, MetaWorld and sims/sidevenv/worker.py, whose loop, framing and shared
memory it uses:
  obs     float64 [E, 39]            MetaWorld's observation of each of its E envs (goal visible)
  images  uint8   [E, C, H, W, 3]    the --cameras in order
What is MetaWorld's:
  reset: seed s seeds the env's np_random, then MetaWorld's reset draws the layout (object and
      goal positions) from it: equal seeds give equal episodes.
  step: the reward is MetaWorld's (0-10) over 10; the extra "start" is the same before the
      chunk's first step (after a reset: MetaWorld's reward of the reset state with a zero
      action), so that the env can form reward differences (potential-based shaping)
  an env's state: MuJoCo's integration state (mj_getState: time, qpos, qvel, act, warm start,
      controls, mocap, ...), the model's body and site positions (resets move the objects'
      fixtures and the goal sites there), the env's plain Python attributes (arrays and numbers:
      the step counter, the previous frame of the stacked observation, the goal, the reward's
      reference points, ...), the last observation and the last reward.
With --expert it holds no envs and answers only
  {"op": "act", "tasks": [B names], "obs": float64 [B, 39]} -> {"ok": true, "actions": float32 [B, 4]}
with MetaWorld's scripted policy of each row's task.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # for sims/sidevenv/worker.py (stdlib + numpy)
from sims.sidevenv.worker import SideWorker, serve  # noqa: E402

OBS_DIM = 39


def _plain(v) -> dict | None:
    """A JSON form of a plain attribute value (numeric array, number, bool, str, None), else None."""
    if isinstance(v, np.ndarray) and v.dtype.kind in "fiub":
        return {"nd": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, np.generic) and v.dtype.kind in "fiub":
        return {"np": v.item(), "dtype": v.dtype.str}
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"py": v}
    return None


def _unplain(d: dict):
    if "nd" in d:
        return np.array(d["nd"], dtype=np.dtype(d["dtype"])).reshape(d["shape"])
    if "np" in d:
        return np.dtype(d["dtype"]).type(d["np"])
    return d["py"]


class Worker(SideWorker):
    def __init__(self, tasks: list[str], height: int, width: int, cameras: list[str]):
        import mujoco
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS

        self.mj = mujoco
        self.envs, self.tasks = [], list(tasks)
        self.renderers, self.flip = {}, {}  # task -> its renderer, and which cameras to rotate
        self.last_reward: list[float] = []  # each env's latest reward / 10 (the start of the next chunk)
        for name in tasks:
            if name not in ALL_V3_ENVIRONMENTS:
                raise ValueError(f"unknown MetaWorld task {name!r}")
            env = ALL_V3_ENVIRONMENTS[name]()
            # goal observable, layouts drawn from the env's own seeded generator (module doc)
            env._partially_observable = False
            env._freeze_rand_vec = False
            env.seeded_rand_vec = True
            del env.sawyer_observation_space  # recomputed with the goal's bounds
            env._set_task_called = True
            env.seed(0)
            env.reset()
            names = [env.model.camera(i).name for i in range(env.model.ncam)]
            bad = [c for c in cameras if c not in names]
            if bad:
                raise ValueError(f"unknown camera {bad[0]!r}; MetaWorld has: {', '.join(names)}")
            self.envs.append(env)
            self.last_reward.append(0.0)
            if cameras and name not in self.renderers:
                # one renderer per task, shared by the task's envs: a renderer (its GL context, the
                # model's meshes and textures) holds about 60 MB, an env 40 MB. The scene is built
                # from each env's own data (body, geom and site poses), and the envs of one task
                # differ in their models only where a reset moves fixtures and goal sites, which
                # reach the scene through data; tests/sims/test_metaworld.py checks the pixels
                env.model.vis.quality.offsamples = 0  # no multisampling: 10x cheaper at 64 px
                # no shadow map: shadows are off below, and MetaWorld's 4096 px map is 64 MB per renderer
                env.model.vis.quality.shadowsize = 0
                r = mujoco.Renderer(env.model, height, width)
                r.scene.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = 0
                r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
                self.renderers[name] = r
                # MetaWorld's corner cameras have their up axis pointing down: rotate their frames
                self.flip[name] = [bool(env.data.cam_xmat[env.model.camera(c).id].reshape(3, 3)[2, 1] < 0)
                                   for c in cameras]
        self.cameras, self.h, self.w = list(cameras), height, width
        self.make_memory(len(tasks), OBS_DIM, len(cameras), height, width)
        env = self.envs[0]
        self.info = {"tasks": tasks, "cameras": self.cameras,
                     "control_hz": 1.0 / (env.model.opt.timestep * env.frame_skip),
                     "max_path_length": int(env.max_path_length)}

    def render_env(self, j: int) -> None:
        if not self.cameras:
            return
        r, env, flip = self.renderers[self.tasks[j]], self.envs[j], self.flip[self.tasks[j]]
        for c, cam in enumerate(self.cameras):
            r.update_scene(env.data, camera=cam)
            img = r.render()
            self.images[j, c] = img[::-1, ::-1] if flip[c] else img

    def reset_env(self, j: int, seed: int, req: dict) -> None:
        env = self.envs[j]
        env.seed(seed)
        obs, _ = env.reset()
        self.obs[j] = obs
        self.last_reward[j] = float(env.evaluate_state(obs, np.zeros(4))[0]) / 10.0

    def step_env(self, j: int, actions: np.ndarray, req: dict) -> tuple[list[bool], list[float], dict]:
        env, start = self.envs[j], self.last_reward[j]
        success, reward = [], []
        for a in actions.reshape(-1, 4):
            obs, r, _, _, info = env.step(np.clip(a, -1.0, 1.0))
            self.obs[j] = obs
            success.append(bool(info["success"]))
            reward.append(float(r) / 10.0)
            self.last_reward[j] = reward[-1]
            if success[-1]:
                break
        return success, reward, {"start": start}

    def get_env_state(self, j: int) -> dict:
        env, sig = self.envs[j], self.mj.mjtState.mjSTATE_INTEGRATION
        mjs = np.empty(self.mj.mj_stateSize(env.model, sig))
        self.mj.mj_getState(env.model, env.data, mjs, sig)
        attrs = {k: p for k, v in vars(env).items() if (p := _plain(v)) is not None}
        return {"mj": mjs.tolist(), "attrs": attrs, "obs": self.obs[j].tolist(), "reward": self.last_reward[j],
                "body_pos": env.model.body_pos.tolist(), "site_pos": env.model.site_pos.tolist()}

    def set_env_state(self, j: int, st: dict) -> None:
        env = self.envs[j]
        env.model.body_pos[:] = st["body_pos"]  # resets move bodies and goal sites in the model
        env.model.site_pos[:] = st["site_pos"]
        mjs, sig = np.asarray(st["mj"], np.float64), self.mj.mjtState.mjSTATE_INTEGRATION
        self.mj.mj_setState(env.model, env.data, mjs, sig)
        self.mj.mj_forward(env.model, env.data)  # positions for rendering; it rewrites the warm start,
        self.mj.mj_setState(env.model, env.data, mjs, sig)  # so the state is set once more
        for k, v in st["attrs"].items():
            setattr(env, k, _unplain(v))
        self.obs[j] = st["obs"]
        self.last_reward[j] = float(st.get("reward", 0.0))

    def close_envs(self) -> None:
        for r in self.renderers.values():
            r.close()
        for env in self.envs:
            env.close()


class Expert:
    """MetaWorld's scripted policies (metaworld.policies), one per task name."""

    def __init__(self):
        import metaworld.policies as mp

        self.classes = {n: getattr(mp, n) for n in dir(mp) if n.startswith("Sawyer") and n.endswith("V3Policy")}
        self.policies: dict = {}
        self.info = {"ok": True, "expert": True}

    def policy(self, task: str):
        if task not in self.policies:
            # "pick-place-v3" -> SawyerPickPlaceV3Policy (peg-insert-side's is PegInsertionSide)
            stem = "".join(p.capitalize() for p in task.removesuffix("-v3").split("-"))
            stem = {"PegInsertSide": "PegInsertionSide"}.get(stem, stem)
            cls = self.classes.get(f"Sawyer{stem}V3Policy")
            if cls is None:
                raise ValueError(f"no scripted policy for {task!r}")
            self.policies[task] = cls()
        return self.policies[task]

    def act(self, req: dict) -> dict:
        obs = np.asarray(req["obs"], np.float64)
        acts = [np.clip(self.policy(t).get_action(o), -1.0, 1.0) for t, o in zip(req["tasks"], obs)]
        return {"ok": True, "actions": np.asarray(acts, np.float32).reshape(len(obs), 4)}

    def hello(self) -> dict:
        return dict(self.info)

    def ops(self) -> dict:
        return {"act": self.act}

    def close(self) -> None:
        pass


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", default="")
    p.add_argument("--height", type=int, default=64)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--cameras", default="", help="comma-separated camera names; empty: state only")
    p.add_argument("--expert", action="store_true")
    serve(p, lambda a: Expert() if a.expert else Worker([t for t in a.tasks.split(",") if t], a.height, a.width,
                                                         [c for c in a.cameras.split(",") if c]))


if __name__ == "__main__":
    main()
