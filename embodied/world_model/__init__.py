"""The world model's training application (`embodied world-model ...`): windows, training, quality report, noise head.
The model and its VecEnv live in sims/world_model/."""
