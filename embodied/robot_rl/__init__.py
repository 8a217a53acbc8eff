"""On-robot RL (`embodied finetune-robot`): an actor process on the robot, a learner process,
interventions, persistence as LeRobot v3 episodes. See docs/robot_rl.md."""
