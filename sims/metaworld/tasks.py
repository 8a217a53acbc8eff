"""MetaWorld task names and their instructions; imports neither MetaWorld nor torch.

Names: "metaworld:MT10" and "metaworld:MT50" (env i runs task i mod n of the benchmark's list),
"metaworld:MT10/<task>" (one task of a benchmark, with its observation layout), "metaworld:<task>"
for one task alone ("metaworld:pick-place-v3"); any of them ending in "@goal" puts the goal's xyz
into the policy's "state" ("metaworld:MT10@goal", "metaworld:MT10/push-v3@goal"). The lists are
MetaWorld 3.1.1's (metaworld.env_dict.MT10_V3 and ALL_V3_ENVIRONMENTS, in that order). The
instructions are ours, one phrase per task, written from the task names (MetaWorld ships none).
"""

from __future__ import annotations

MAX_PATH_LENGTH = 500  # SawyerXYZEnv.max_path_length of every v3 task
# the cameras of MetaWorld's scenes; corner2 is the default (the view most MetaWorld image policies use)
CAMERAS = ("corner2", "corner", "corner3", "corner4", "topview", "behindGripper", "gripperPOV")

MT10 = ("reach-v3", "push-v3", "pick-place-v3", "door-open-v3", "drawer-open-v3", "drawer-close-v3",
        "button-press-topdown-v3", "peg-insert-side-v3", "window-open-v3", "window-close-v3")

INSTRUCTIONS: dict[str, str] = {
    "assembly-v3": "put the ring onto the peg",
    "basketball-v3": "put the ball into the hoop",
    "bin-picking-v3": "move the cube from one bin to the other",
    "box-close-v3": "put the lid on the box",
    "button-press-topdown-v3": "press the button from the top",
    "button-press-topdown-wall-v3": "press the button from the top behind the wall",
    "button-press-v3": "press the button",
    "button-press-wall-v3": "press the button behind the wall",
    "coffee-button-v3": "press the button on the coffee machine",
    "coffee-pull-v3": "pull the mug out of the coffee machine",
    "coffee-push-v3": "push the mug under the coffee machine",
    "dial-turn-v3": "turn the dial",
    "disassemble-v3": "take the ring off the peg",
    "door-close-v3": "close the door",
    "door-lock-v3": "lock the door",
    "door-open-v3": "open the door",
    "door-unlock-v3": "unlock the door",
    "hand-insert-v3": "put the hand into the hole",
    "drawer-close-v3": "close the drawer",
    "drawer-open-v3": "open the drawer",
    "faucet-open-v3": "turn the faucet on",
    "faucet-close-v3": "turn the faucet off",
    "hammer-v3": "hammer the nail into the wall",
    "handle-press-side-v3": "press the handle down from the side",
    "handle-press-v3": "press the handle down",
    "handle-pull-side-v3": "pull the handle up from the side",
    "handle-pull-v3": "pull the handle up",
    "lever-pull-v3": "pull the lever up",
    "pick-place-wall-v3": "pick up the puck and place it at the goal behind the wall",
    "pick-out-of-hole-v3": "pick the peg out of the hole",
    "pick-place-v3": "pick up the puck and place it at the goal",
    "plate-slide-v3": "slide the plate into the cabinet",
    "plate-slide-side-v3": "slide the plate into the cabinet from the side",
    "plate-slide-back-v3": "slide the plate out of the cabinet",
    "plate-slide-back-side-v3": "slide the plate out of the cabinet to the side",
    "peg-insert-side-v3": "insert the peg into the hole from the side",
    "peg-unplug-side-v3": "unplug the peg from the side",
    "soccer-v3": "kick the ball into the goal",
    "stick-push-v3": "push the thermos with the stick",
    "stick-pull-v3": "pull the thermos with the stick",
    "push-v3": "push the puck to the goal",
    "push-wall-v3": "push the puck to the goal behind the wall",
    "push-back-v3": "push the puck back to the goal",
    "reach-v3": "reach the goal",
    "reach-wall-v3": "reach the goal behind the wall",
    "shelf-place-v3": "place the block on the shelf",
    "sweep-into-v3": "sweep the puck into the hole",
    "sweep-v3": "sweep the puck off the table",
    "window-open-v3": "slide the window open",
    "window-close-v3": "slide the window closed",
}
MT50 = tuple(INSTRUCTIONS)  # MetaWorld's ALL_V3_ENVIRONMENTS order
BENCHMARKS = {"MT10": MT10, "MT50": MT50}


def suite_names() -> list[str]:
    return [f"metaworld:{b}" for b in BENCHMARKS]


GOAL_VARIANT = "goal"  # "<name>@goal": state = hand xyz, gripper, goal xyz (docs/metaworld.md)


def split_variant(task: str) -> tuple[str, bool]:
    """"metaworld:MT10@goal" -> ("metaworld:MT10", True); a name without "@" -> (it, False).
    One-line EnvError for another variant."""
    from sims.vecenv import EnvError

    base, at, variant = task.partition("@")
    if at and variant != GOAL_VARIANT:
        raise EnvError(f"task: unknown MetaWorld observation variant {variant!r} in {task!r}; allowed: "
                       f"@{GOAL_VARIANT} (the goal's xyz in the state) or none")
    return base, bool(at)


def parse_name(task: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A task name -> (the benchmark's tasks, which the privileged one-hot ranges over; the env's
    tasks, env i running the i mod n-th). "metaworld:MT10" -> (MT10, MT10); "metaworld:MT10/push-v3"
    -> (MT10, ("push-v3",)): one task with the benchmark's observation layout (the protocol runs
    each task of a benchmark so); "metaworld:push-v3" -> ((), ("push-v3",)); an "@goal" ending
    changes the state only (split_variant). One-line EnvError for anything else."""
    from sims.vecenv import EnvError

    body = split_variant(task)[0].removeprefix("metaworld:")
    bench, _, sub = body.partition("/")
    if bench in BENCHMARKS:
        if not sub:
            return BENCHMARKS[bench], BENCHMARKS[bench]
        if sub in BENCHMARKS[bench]:
            return BENCHMARKS[bench], (sub,)
        raise EnvError(f"task: {sub!r} is not a task of {bench} in {task!r}; allowed: {', '.join(BENCHMARKS[bench])}")
    if body in INSTRUCTIONS:
        return (), (body,)
    raise EnvError(f"task: unknown MetaWorld task {body!r} in {task!r}; allowed: metaworld:MT10, metaworld:MT50, "
                   f"metaworld:MT10/<task>, metaworld:<one of the 50 v3 tasks, e.g. pick-place-v3>, each with an "
                   f"optional @goal (docs/metaworld.md)")


def tasks_of(task: str) -> list[str]:
    """"metaworld:MT10" -> ["metaworld:MT10/reach-v3", ...] (each with the benchmark's layout;
    "metaworld:MT10@goal" -> ["metaworld:MT10/reach-v3@goal", ...]); a one-task name -> [it]."""
    suite, tasks = parse_name(task)
    base, goal = split_variant(task)
    if suite and len(tasks) > 1:
        return [f"{base}/{t}" + (f"@{GOAL_VARIANT}" if goal else "") for t in tasks]
    return [task]
