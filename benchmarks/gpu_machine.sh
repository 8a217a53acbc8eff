#!/usr/bin/env bash
# On a lent GPU machine (bare image, no network): unpack what benchmarks/gpu_bundle.sh prepared,
# then run the GPU check, or with --run any command in that environment. Run from the checkout's root:
#     bash benchmarks/gpu_machine.sh [gpu_check.py arguments]
#     bash benchmarks/gpu_machine.sh --run python3 benchmarks/bench_vla_recipes.py ...
# .gl/*.deb go to / (Vulkan / EGL loaders; the driver's ICD is in the image), .whl/gpu-site.tar.xz
# to /tmp/gpu-site, which goes first on PYTHONPATH. A copy of ManiSkill's ppo.py, if any, is taken
# from $MS_PPO_BASELINE (default .cache/peers/maniskill_ppo/ppo.py).
set -euo pipefail
cd "$(dirname "$0")/.."
BUNDLE=${GPU_BUNDLE_DIR:-.}
if ls "$BUNDLE"/.gl/*.deb >/dev/null 2>&1 && ! ldconfig -p | grep -q libvulkan.so.1; then
    for f in "$BUNDLE"/.gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
if [ -f "$BUNDLE/.whl/gpu-site.tar.xz" ] && [ ! -d /tmp/gpu-site/mani_skill ]; then
    mkdir -p /tmp/gpu-site && tar -xJf "$BUNDLE/.whl/gpu-site.tar.xz" -C /tmp/gpu-site
fi
# MuJoCo Warp and PyAV, in pieces (gpu_bundle.sh); WARP_PIECES names the folder that holds them when
# they came in separate calls (default: the bundle's .whl)
PIECES=${WARP_PIECES:-$BUNDLE/.whl}
if ls "$PIECES"/warp-site.tar.xz.part* >/dev/null 2>&1 && [ ! -d /tmp/gpu-site/mujoco_warp ]; then
    mkdir -p /tmp/gpu-site && cat "$PIECES"/warp-site.tar.xz.part* | xz -d | tar -x -C /tmp/gpu-site
fi
export WARP_CACHE_PATH=${WARP_CACHE_PATH:-/tmp/warp-cache}
for z in "$BUNDLE"/.whl/physx-*.zip; do  # SAPIEN's GPU PhysX, where SAPIEN looks for it
    [ -f "$z" ] || continue
    v=$(basename "$z" .zip); v=${v#physx-}
    mkdir -p "$HOME/.sapien/physx/$v" && unzip -oq "$z" -d "$HOME/.sapien/physx/$v"
done
export PYTHONPATH="/tmp/gpu-site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 MUJOCO_GL=egl PYTHONUNBUFFERED=1 MS_SKIP_ASSET_DOWNLOAD_PROMPT=1
export MS_PPO_BASELINE=${MS_PPO_BASELINE:-.cache/peers/maniskill_ppo/ppo.py}
if [ "${1:-}" = "--run" ]; then
    shift
    exec "$@"
fi
exec python3 benchmarks/gpu_check.py "$@"
