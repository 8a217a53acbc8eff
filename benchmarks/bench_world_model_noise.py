"""How well a PushCube state model's noise matches its one-step error (issue 22): the
constant residual_std against the learned noise head (embodied/world_model/noise.py).

On the model's held-out episodes (teacher forced: the members' mean step from each recorded
state under its recorded action), steps are grouped by what the cube is doing: at rest (under
5 mm/s) with the gripper's centre more than 6 cm away, at rest within 6 cm, moving faster
than 5 cm/s. Per group, for the cube's x and y: the error's root mean square and the noise
std the model would draw (the median over the group's steps), in mm; and the Gaussian NLL of
the errors under either noise (nats per step and moving dimension, all dimensions). For a
model with a noise head, the head was fit on half of these episodes (the NLL its fit reports
is on the other half only).

  python benchmarks/bench_world_model_noise.py --wm runs/wm_noise --out noise.json
"""

from __future__ import annotations

import argparse
import json

import torch

STILL, NEAR, FAST = 0.005, 0.06, 0.05  # m/s, m, m/s


def main() -> None:
    from sims.mujoco.tasks.base import CUBE_LAYOUT as L
    from sims.world_model.checkpoint import load_world_model
    from embodied.world_model.noise import gaussian_nll, one_step_errors
    from embodied.world_model.train import heldout_episodes

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wm", required=True, help="a PushCube state-latent checkpoint")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    model, _ = load_world_model(args.wm, "PushCube")
    if model.cfg.latent_space != "state":
        raise SystemExit("--wm: needs a model with latent_space=state (its latent is the privileged vector)")
    z, a, err = one_step_errors(model, heldout_episodes(model.cfg))
    x = model.denormalize(z)
    near = (x[:, L["cube_minus_tcp"]]).norm(dim=-1) <= NEAR
    speed = x[:, L["cube_vel"]].norm(dim=-1)
    base = torch.tensor(model.cfg.residual_std)
    with torch.no_grad():
        std = model.noise_std(z, a)
    moving = base > 0
    mm = model.std * 1000  # normalised latent units -> mm (positions)
    cube = L["cube"].start, L["cube"].start + 2
    groups = {"at rest, gripper > 6 cm away": (speed < STILL) & ~near,
              "at rest, gripper within 6 cm": (speed < STILL) & near, "moving > 5 cm/s": speed > FAST}
    out = {"wm": args.wm, "noise_head": model.cfg.noise_head, "steps": len(z),
           "nll_residual_std": float(gaussian_nll(err, base, moving)),
           "nll_noise_std": float(gaussian_nll(err, std, moving)), "groups": {}}
    for name, mask in groups.items():
        sl = slice(*cube)
        out["groups"][name] = {
            "steps": int(mask.sum()),
            "error_rms_mm_xy": ((err[mask][:, sl] * mm[sl]) ** 2).mean(0).sqrt().tolist(),
            "noise_std_median_mm_xy": (std[mask][:, sl] * mm[sl]).median(0).values.tolist(),
            "residual_std_mm_xy": (base[sl] * mm[sl]).tolist()}
    print(json.dumps(out, indent=1))
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
