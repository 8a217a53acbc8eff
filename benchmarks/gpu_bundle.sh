#!/usr/bin/env bash
# The Python packages and system libraries that `make gpu-check` needs on a GPU machine whose
# image has PyTorch, transformers, numpy, scipy ... but not the simulators, and that cannot
# reach a package registry. Run here (with network); the results travel with the checkout.
#
#   .whl/gpu-site.tar.xz  cp312 manylinux x86_64 packages, unpacked and pruned (see below),
#                         to be extracted on the GPU machine and put on PYTHONPATH
#   .gl/*.deb             libvulkan1, libegl1 ... (apt-get download, amd64), unpacked there with dpkg -x
#
# Versions are the ones constraints.txt pins. Only packages the image lacks are bundled: the
# image's package list is in the GPU machine's notes; numpy, scipy, h5py, matplotlib, lxml,
# opencv (headless), pyyaml, tqdm, huggingface_hub, imageio, tensorboard ... are there.
# mani-skill's wheel is 100 MB, mostly robot and scene assets that the Panda tabletop tasks do
# not load, and SAPIEN's carries C++ headers, a stereo-sensor pattern and macOS libraries (its
# denoiser stays: pysapien links it): pruning those keeps the bundle under the 64 MiB a device
# call may carry.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.whl
DL=.cache/gpu-bundle/wheels
SITE=.cache/gpu-bundle/site
mkdir -p "$OUT" "$DL"

pin() { grep -i "^$1==" constraints.txt | head -1; }
PKGS=(mani_skill sapien mujoco mujoco-core gymnasium Farama-Notifications glfw PyOpenGL
      dacite defusedxml pytorch-kinematics arm_pytorch_utilities pytorch-seed transforms3d
      trimesh pyperclip importlib_resources tyro docstring_parser typeguard
      ipython ipython_pygments_lexers jedi parso traitlets matplotlib-inline pexpect ptyprocess
      prompt_toolkit wcwidth stack-data executing asttokens pure_eval
      bitsandbytes)  # 8-bit Adam of the vla_* parts' *_8bit modes (needs torch, numpy, packaging: in the image)
SPECS=()
for p in "${PKGS[@]}"; do
    s=$(pin "$p"); [ -n "$s" ] || { echo "gpu_bundle: $p is not pinned in constraints.txt" >&2; exit 2; }
    SPECS+=("$s")
done
PLAT=()
for t in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    PLAT+=(--platform "${t}_x86_64")
done
env -u PIP_CONSTRAINT python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLAT[@]}" --platform any -d "$DL" "${SPECS[@]}"

rm -rf "$SITE" && mkdir -p "$SITE"
for w in "$DL"/*.whl; do
    case "$(basename "$w")" in mujoco_studio-*) continue;; esac  # GUI only; `import mujoco` does not load it
    python3 -m zipfile -e "$w" "$SITE"
done
# Pruning: what the Panda tabletop tasks (PickCube, PushCube, ...) and the importable modules need stays.
MS=$SITE/mani_skill
for r in "$MS"/assets/robots/*/; do [ "$(basename "$r")" = panda ] || rm -rf "$r"; done
rm -rf "$MS"/assets/robots/panda/realsense2_description "$MS"/assets/robots/panda/sciurus17_description \
       "$MS"/assets/environment_maps "$MS"/assets/deformable_manipulation "$MS"/assets/maniskill2-scene-2.glb
for d in replicacad robocasa ai2thor kitchen_counter; do
    find "$MS/utils/scene_builder/$d" -type f ! -name '*.py' -delete
done
# bitsandbytes: the image's torch is built for CUDA 13; its CUDA 11/12, ROCm and XPU libraries go
rm -f "$SITE"/bitsandbytes/libbitsandbytes_cuda1[12]*.so "$SITE"/bitsandbytes/libbitsandbytes_rocm*.so \
      "$SITE"/bitsandbytes/libbitsandbytes_xpu*.so
rm -rf "$SITE"/sapien/include "$SITE"/sapien/vulkan_library/*.dylib \
       "$SITE"/sapien/sensor/assets
find "$SITE" -name '__pycache__' -prune -exec rm -rf {} +
tar -C "$SITE" -cf - . | xz -T0 -6 > "$OUT/gpu-site.tar.xz"
echo "gpu_bundle: $OUT/gpu-site.tar.xz $(du -m "$OUT/gpu-site.tar.xz" | cut -f1) MB ($(du -sm "$SITE" | cut -f1) MB unpacked)"

# MuJoCo Warp (env.backend=warp) and PyAV (the demo pipeline's datasets), for the warp parts of the
# check: warp-lang's library is 81 MB compressed, more than one device call carries (64 MiB), so
# the archive is cut into 45 MB pieces, .whl/warp-site.tar.xz.part*, that travel one call each
# into one folder there; gpu_machine.sh joins and unpacks them. warp-clang (warp's CPU compiler)
# and warp's examples and tests stay behind: the GPU machine compiles with NVRTC.
WSPECS=()
for p in mujoco-warp warp-lang array-api-compat av; do
    s=$(pin "$p"); [ -n "$s" ] || { echo "gpu_bundle: $p is not pinned in constraints.txt" >&2; exit 2; }
    WSPECS+=("$s")
done
env -u PIP_CONSTRAINT python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLAT[@]}" --platform any -d "$DL" "${WSPECS[@]}"
WSITE=.cache/gpu-bundle/site-warp
rm -rf "$WSITE" && mkdir -p "$WSITE"
for w in "$DL"/mujoco_warp-*.whl "$DL"/warp_lang-*.whl "$DL"/array_api_compat-*.whl "$DL"/av-*.whl; do
    python3 -m zipfile -e "$w" "$WSITE"
done
rm -rf "$WSITE"/warp/bin/warp-clang.so "$WSITE"/warp/examples "$WSITE"/warp/tests "$WSITE"/mujoco_warp/test_data
find "$WSITE" -name '__pycache__' -prune -exec rm -rf {} +
rm -f "$OUT"/warp-site.tar.xz.part*
tar -C "$WSITE" -cf - . | xz -T0 -6 | split -b 45m - "$OUT/warp-site.tar.xz.part"
echo "gpu_bundle: $(ls "$OUT"/warp-site.tar.xz.part* | wc -l) pieces of $OUT/warp-site.tar.xz ($(du -sm "$WSITE" | cut -f1) MB unpacked)"

# SAPIEN's GPU PhysX (libPhysXGpu_64.so): SAPIEN downloads it from github.com on the first physx_cuda
# env; a machine that cannot reach github.com needs it carried. The version is sapien.physx.version()
# of the pinned SAPIEN (3.0.3). Where github.com cannot be reached from here either, the bundle goes
# without it and the GPU check skips the physx_cuda parts, saying why.
PHYSX_VERSION=105.1-physx-5.3.1.patch0
if [ ! -f "$OUT/physx-$PHYSX_VERSION.zip" ]; then
    if curl -fsSL --max-time 300 -o "$OUT/physx-$PHYSX_VERSION.zip.part" \
        "https://github.com/sapien-sim/physx-precompiled/releases/download/$PHYSX_VERSION/linux-so.zip"; then
        mv "$OUT/physx-$PHYSX_VERSION.zip.part" "$OUT/physx-$PHYSX_VERSION.zip"
    else
        rm -f "$OUT/physx-$PHYSX_VERSION.zip.part"
        echo "gpu_bundle: WARNING: github.com unreachable: no PhysX GPU library in the bundle (physx_cuda will not run)" >&2
    fi
fi

# Vulkan / EGL loaders for the GPU machine (its driver brings the ICD, not always the loader).
mkdir -p .gl /tmp/gpu-bundle-apt/partial
if ! ls .gl/libvulkan1_*.deb >/dev/null 2>&1; then
    o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gpu-bundle-apt)
    apt-get "${o[@]}" update -qq
    (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
echo "gpu_bundle: .gl $(du -sm .gl | cut -f1) MB"
