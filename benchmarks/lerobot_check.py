"""Our datasets in LeRobot's own loader, and LeRobot's datasets in ours (`make lerobot-check`).

Four steps over one work folder, run by two interpreters (the Makefile runs them in order):
  write-ours     (.venv)           `embodied collect` ReachColor (two tasks, front + wrist cameras)
                                   into WORK/ours; our reader's arrays into WORK/ours.npz
  lerobot-reads  (.venv-lerobot)   LeRobot's LeRobotDataset (the standalone `lerobot-dataset`,
                                   module `ledataset`) loads WORK/ours, whole and episodes=[1]:
                                   every item's state, action, indices, timestamp, task text and
                                   decoded frames against WORK/ours.npz
  write-lerobot  (.venv-lerobot)   LeRobot's own writer records WORK/lerobot: 3 episodes, two tasks,
                                   AV1 video (LeRobot's default), then a resumed session of 2 more
                                   whose data file cap is tiny (new files); what it wrote and what its
                                   loader decodes into WORK/lerobot.npz
  read-lerobot   (.venv)           our read_episodes and LeRobotDataset on WORK/lerobot against
                                   WORK/lerobot.npz; a few SFT steps on it

Each step prints what it compared and exits 1 on a mismatch. Frames decoded by the two loaders
are compared exactly where both decode the same file (max abs difference in uint8 levels).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _fail(msg: str) -> None:
    print(f"MISMATCH: {msg}")
    sys.exit(1)


def _same(name: str, a: np.ndarray, b: np.ndarray, tol: float = 0.0) -> float:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        _fail(f"{name}: shape {a.shape} vs {b.shape}")
    diff = float(np.abs(a.astype(np.float64) - b.astype(np.float64)).max()) if a.size else 0.0
    if diff > tol:
        _fail(f"{name}: max abs difference {diff} > {tol}")
    return diff


# ---------------------------------------------------------------- our side (.venv)

def write_ours(work: Path) -> None:
    from embodied.data.collect import collect_demos
    from embodied.data.dataset import read_episodes

    out = work / "ours"
    collect_demos("ReachColor", 4, out, seed=0, obs_mode="rgb", image_size=32, num_envs=4,
                  cameras=["front", "wrist"])
    eps = list(read_episodes(out))
    ref = {k: np.concatenate([e[k].numpy() for e in eps]) for k in ("obs.state", "action", "obs.rgb_front",
                                                                      "obs.rgb_wrist")}
    lengths = [len(e["action"]) for e in eps]
    ref["episode_index"] = np.repeat(np.arange(len(eps)), lengths)
    ref["task"] = np.array([e["instruction"] for e in eps for _ in range(len(e["action"]))])
    np.savez(work / "ours.npz", **ref)
    print(f"write-ours: {len(eps)} episodes, {sum(lengths)} frames, tasks {sorted(set(map(str, ref['task'])))}")


def read_lerobot(work: Path) -> None:
    import torch

    from embodied.data.dataset import read_episodes, read_meta
    from embodied.data.lerobot import LeRobotDataset

    root = work / "lerobot"
    ref = np.load(work / "lerobot.npz")
    meta = read_meta(root)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet")) + \
        sorted(str(p.relative_to(root)) for p in root.rglob("*.mp4"))
    print(f"read-lerobot: files {files}")
    eps = list(read_episodes(root))
    get = lambda k: np.concatenate([e[k].numpy() for e in eps])  # noqa: E731
    _same("observation.state", get("obs.state"), ref["state"])
    _same("action", get("action"), ref["action"])
    d_src = _same("frames vs the recorded images", get("obs.rgb_top"), ref["source"], tol=40)
    d_dec = _same("frames vs LeRobot's decoding", get("obs.rgb_top"), ref["decoded"], tol=2)
    tasks = [e["instruction"] for e in eps for _ in range(len(e["action"]))]
    if tasks != list(ref["task"]):
        _fail(f"tasks: {sorted(set(tasks))} vs {sorted(set(ref['task']))}")
    ds = LeRobotDataset(root, chunk_size=2, episodes=[3])
    sel = ref["episode_index"] == 3
    _same("subset episodes=[3] actions", torch.stack([ds[i]["actions"][0] for i in range(len(ds))]).numpy(),
          ref["action"][sel])
    print(f"read-lerobot: {meta['total_episodes']} episodes, {len(tasks)} frames: state, action, tasks exact; "
          f"frames max |ours - LeRobot's decoding| = {d_dec:.0f} levels, max |ours - recorded| = {d_src:.0f} "
          f"(AV1 is lossy); subset episodes=[3] ok")
    from embodied.imitation.sft import SFTConfig, build_policy, train_sft

    cfg = SFTConfig(policy="flow_vla", preset="tiny", dataset=str(root), cameras=["top"], image_size=32,
                    chunk_size=2, steps=3, batch_size=4, warmup_steps=1, eval_every=0, eval_episodes=0,
                    save_every=0, run_dir=str(work / "sft"))
    dataset = LeRobotDataset(root, chunk_size=cfg.chunk_size)
    torch.manual_seed(cfg.seed)  # the initial weights
    summary = train_sft(build_policy(cfg, dataset.stats), dataset, cfg)
    print(f"read-lerobot: SFT {summary['steps']} steps, losses {[round(x, 3) for x in summary['loss']]}")


# ---------------------------------------------------------------- LeRobot's side (.venv-lerobot)

def _import_ledataset():
    """PyPI's torchvision is a CUDA build whose C++ ops do not load on CPU; it registers fake
    kernels for nms and qnms at import, which fails unless their schemas exist. Declare them."""
    import torch

    lib = torch.library.Library("torchvision", "DEF")  # noqa: F841 (kept alive by the module)
    lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    globals()["_torchvision_lib"] = lib
    from ledataset.datasets.lerobot_dataset import LeRobotDataset

    return LeRobotDataset


def _frames_uint8(item_image) -> np.ndarray:
    """LeRobot's float [3, H, W] in [0, 1] -> uint8 [H, W, 3]."""
    return np.round(item_image.permute(1, 2, 0).numpy() * 255.0).astype(np.uint8)


def lerobot_reads(work: Path) -> None:
    LeRobotDataset = _import_ledataset()
    ref = np.load(work / "ours.npz")
    ds = LeRobotDataset("local/ours", root=work / "ours", video_backend="torchcodec")
    items = [ds[i] for i in range(len(ds))]
    _same("observation.state", np.stack([it["observation.state"].numpy() for it in items]), ref["obs.state"])
    _same("action", np.stack([it["action"].numpy() for it in items]), ref["action"])
    _same("index", np.array([it["index"].item() for it in items]), np.arange(len(items)))
    _same("episode_index", np.array([it["episode_index"].item() for it in items]), ref["episode_index"])
    diffs = {cam: _same(f"{cam} frames", np.stack([_frames_uint8(it[f"observation.images.{cam}"]) for it in items]),
                        ref[f"obs.rgb_{cam}"], tol=2) for cam in ("front", "wrist")}
    tasks = [it["task"] for it in items]
    if tasks != list(ref["task"]):
        _fail(f"tasks: LeRobot reads {sorted(set(map(str, tasks)))}, ours {sorted(set(ref['task']))}")
    sub = LeRobotDataset("local/ours", root=work / "ours", episodes=[1], video_backend="torchcodec")
    sel = ref["episode_index"] == 1
    sub_items = [sub[i] for i in range(len(sub))]
    _same("subset episodes=[1] action", np.stack([it["action"].numpy() for it in sub_items]), ref["action"][sel])
    _same("subset episodes=[1] front frames",
          np.stack([_frames_uint8(it["observation.images.front"]) for it in sub_items]), ref["obs.rgb_front"][sel], 2)
    if [it["task"] for it in sub_items] != list(ref["task"][sel]):
        _fail("subset episodes=[1]: tasks differ")
    print(f"lerobot-reads: {len(items)} frames of {ds.num_episodes} episodes: state, action, index, episode_index, "
          f"tasks {sorted(set(tasks))} exact; frames max |LeRobot - ours| = {diffs} levels; "
          f"episodes=[1]: {len(sub_items)} frames ok")


def write_lerobot(work: Path) -> None:
    LeRobotDataset = _import_ledataset()
    root, fps, (h, w) = work / "lerobot", 10, (32, 48)
    features = {"observation.state": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
                "action": {"dtype": "float32", "shape": (6,), "names": [f"j{i}" for i in range(6)]},
                "observation.images.top": {"dtype": "video", "shape": (h, w, 3),
                                           "names": ["height", "width", "channels"]}}
    rng = np.random.default_rng(0)
    tasks = ["pick up the cube", "push the cube left"]
    rec = {"state": [], "action": [], "source": [], "task": [], "episode_index": []}

    def record(ds, episode: int, n: int) -> None:
        for t in range(n):
            img = np.zeros((h, w, 3), np.uint8)
            img[..., 0] = 20 * episode + 5 * t
            img[4:12, 2 * t:2 * t + 8] = (255, 255, 0)  # a moving block
            frame = {"observation.state": rng.normal(size=6).astype(np.float32),
                     "action": rng.normal(size=6).astype(np.float32), "observation.images.top": img,
                     "task": tasks[episode % 2]}
            for k, key in (("state", "observation.state"), ("action", "action"), ("source", "observation.images.top"),
                           ("task", "task")):
                rec[k].append(frame[key])
            rec["episode_index"].append(episode)
            ds.add_frame(frame)
        ds.save_episode()

    ds = LeRobotDataset.create("local/lerobot", fps=fps, features=features, root=root, robot_type="test")
    for e, n in enumerate([12, 9, 14]):
        record(ds, e, n)
    ds.finalize()
    ds = LeRobotDataset("local/lerobot", root=root)  # resume the recording
    ds.meta.update_chunk_settings(data_files_size_in_mb=0.001, video_files_size_in_mb=0.001)
    for e, n in zip([3, 4], [11, 8]):
        record(ds, e, n)
    ds.finalize()
    back = LeRobotDataset("local/lerobot", root=root, video_backend="torchcodec")
    decoded = np.stack([_frames_uint8(back[i]["observation.images.top"]) for i in range(len(back))])
    _same("LeRobot's own actions", np.stack([back[i]["action"].numpy() for i in range(len(back))]),
          np.stack(rec["action"]))
    np.savez(work / "lerobot.npz", state=np.stack(rec["state"]), action=np.stack(rec["action"]),
             source=np.stack(rec["source"]), decoded=decoded, task=np.array(rec["task"]),
             episode_index=np.array(rec["episode_index"]))
    print(f"write-lerobot: {back.num_episodes} episodes, {len(back)} frames, two sessions")


def main() -> None:
    steps = {"write-ours": write_ours, "lerobot-reads": lerobot_reads, "write-lerobot": write_lerobot,
             "read-lerobot": read_lerobot}
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=list(steps))
    p.add_argument("work", type=Path)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    steps[args.step](args.work)


if __name__ == "__main__":
    main()
