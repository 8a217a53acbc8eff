"""The actor-learner link at the end of a run: a learner that connects just as the actor's run
ends still gets the episodes it lacks (its hello answered) before the stop. Before this was
so, a learner restarted late in tests/robot_rl/test_robot_rl_faults.py once ended with one episode
fewer in its buffer than the run had recorded."""

from __future__ import annotations

from embodied.robot_rl.config import config_from_dict
from embodied.robot_rl.data import save_policy
from embodied.robot_rl.link import connect_learner
from embodied.robot_rl.networks import TanhGaussianActor


def test_a_learner_connecting_as_the_run_ends_gets_the_episodes_it_lacks(tmp_path):
    from embodied.robot_rl.actor import Actor

    run = tmp_path / "run"
    run.mkdir()
    save_policy(run / "policy.safetensors", TanhGaussianActor(15, 4, (8, 8)), 0, (8, 8))
    cfg = config_from_dict({"run_dir": str(run), "robot": {"task": "Reach", "privileged_topic": "/privileged",
                                                           "privileged_dim": 15, "max_episode_steps": 5},
                            "sim": {}, "actor": {"episodes": 2, "eval_every": 0}})
    actor = Actor(cfg)
    try:
        obs, _ = actor.env.reset()
        for i in range(2):  # both episodes run with no learner: recorded, kept in memory, sent nowhere
            obs, _ = actor.episode(obs, i)
        conn = connect_learner(run, 10.0)  # a learner that read episode 0 from disk connects now
        conn.send(("hello", {"episodes": 1}))
        for _ in range(1000):
            if actor.link.connected:
                break
            conn.poll(0.01)
        summary = actor.run()  # nothing left to run: the run ends at once
    finally:
        actor.close()
    assert summary["ended"] == "episodes"
    msgs = []
    while not msgs or msgs[-1][0] != "stop":
        assert conn.poll(10.0), [m[0] for m in msgs]
        msgs.append(conn.recv())
    sent = [(int(m[1]["episode"]), int(m[1]["step"])) for m in msgs if m[0] == "transition"]
    assert sent == [(1, t["step"]) for t in actor.memory[1]] and len(sent) >= 1
    assert msgs[-1] == ("stop", "episodes")
    conn.close()
