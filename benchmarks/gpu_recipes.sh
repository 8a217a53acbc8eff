#!/usr/bin/env bash
# On a lent GPU machine: the RL stage of benchmarks/bench_vla_recipes.py for several recipes and
# seeds at once (one child process per recipe and seed, all sharing the GPU), from SFT checkpoints
# made beforehand by `bench_vla_recipes.py --stage sft`, next to the GPU check's CUDA tests.
# From the checkout's root:
#
#   bash benchmarks/gpu_recipes.sh SFT_DIR OUT MINUTES RECIPES SEEDS [bench_vla_recipes.py arguments]
#   bash benchmarks/gpu_recipes.sh runs/bench_compose $OUT 6 compose_grpo_flow,compose_grpo_ar 0,1,2 \
#       --held-out ComposeHeldOut --set train.device=cuda env.num_threads=2 train.save_every=0
#
# SFT_DIR holds <sft config>_s<seed>/final for each seed (only those travel to the GPU machine,
# not the demos). Each run stops after MINUTES (SIGINT, its last iteration kept); OUT gets one
# folder per recipe and seed (log.txt, results.json, the run), the merged results.json and
# success_curves.png, and the GPU check's CUDA-test table (gpu_check.md). GPU_RUN (default
# `bash benchmarks/gpu_machine.sh --run`) and PYTHON (python3) run it elsewhere, e.g. on a CPU
# machine with GPU_RUN=env PYTHON=.venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
SFT=$1 OUT=$2 MINUTES=$3 RECIPES=$4 SEEDS=$5
shift 5
mkdir -p "$OUT"
RUN=${GPU_RUN:-bash benchmarks/gpu_machine.sh --run}
PY=${PYTHON:-python3}
$RUN true  # unpack the bundle once, before the runs start
$RUN $PY benchmarks/gpu_check.py --parts tests --budget 150 --out "$OUT/gpu_check.md" >"$OUT/gpu_check.log" 2>&1 &
dirs=()
for r in ${RECIPES//,/ }; do
    for s in ${SEEDS//,/ }; do
        d="$OUT/$r/s$s"
        mkdir -p "$d"
        for f in "$SFT"/*_s"$s"; do ln -sfn "$(realpath "$f")" "$d/"; done
        $RUN $PY benchmarks/bench_vla_recipes.py --recipes "$r" --seeds "$s" \
            --stage rl --rl-minutes "$MINUTES" --out "$d" "$@" >"$d/log.txt" 2>&1 &
        dirs+=("$d")
    done
done
wait
done_dirs=$(for d in "${dirs[@]}"; do [ -f "$d/results.json" ] && printf '%s,' "$d"; done)
[ -n "$done_dirs" ] || { echo "gpu_recipes: no run finished; see $OUT/*/s*/log.txt" >&2; exit 1; }
$RUN $PY benchmarks/bench_vla_recipes.py --merge "${done_dirs%,}" --out "$OUT"
