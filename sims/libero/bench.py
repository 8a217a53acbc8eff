"""Cost of LIBERO behind our VecEnv: worker start, soft reset, step and chunk, state-only and
rendered at 128 px (docs/libero.md). Run: python -m sims.libero.bench [--task libero:libero_spatial/0]

Prints one JSON line per setting (sims/sidevenv/bench.py): ms per env step and env steps per
second, and the machine's load average while it ran.
"""

from __future__ import annotations

import argparse
import json

from sims.sidevenv.bench import cost


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", default="libero:libero_spatial/0")
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--repeats", type=int, default=16)
    args = p.parse_args()
    for num_envs, obs_mode in ((1, "state"), (2, "state"), (1, "rgb"), (2, "rgb")):
        print(json.dumps(cost(args.task, num_envs, obs_mode, 128, args.chunk, args.repeats, 7, scale=0.1)), flush=True)


if __name__ == "__main__":
    main()
