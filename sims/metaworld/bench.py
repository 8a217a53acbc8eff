"""Cost of MetaWorld behind our VecEnv: worker start, reset, step and chunk, state-only and
rendered at 64 px (docs/metaworld.md). Run: python -m sims.metaworld.bench

Prints one JSON line per setting (sims/sidevenv/bench.py): env steps per second (B envs per call,
K steps per chunk), ms per env step, and the machine's load average while it ran.
benchmarks/bench_sidevenv.py compares two checkouts on MT10.
"""

from __future__ import annotations

import argparse
import json

from sims.sidevenv.bench import cost


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--chunk", type=int, default=8)
    p.add_argument("--repeats", type=int, default=200)
    p.add_argument("--size", type=int, default=64)
    args = p.parse_args()
    for task, n, workers in (("metaworld:pick-place-v3", 1, 1), ("metaworld:MT10", 10, 1), ("metaworld:MT10", 10, 2)):
        for obs_mode in ("state", "rgb"):
            print(json.dumps(cost(task, n, obs_mode, args.size, args.chunk, args.repeats, 4, num_workers=workers)),
                  flush=True)


if __name__ == "__main__":
    main()
