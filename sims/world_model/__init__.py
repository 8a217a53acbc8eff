"""A learned world model as a virtual environment (docs/world_model.md).

model.py: the network (encoder, ensemble of latent dynamics members, decoder, heads);
vision.py: with cameras, the conv encoder of the frames and the decoder back to them;
rollout.py: the members' latent steps; checkpoint.py: save/load; env.py: WorldModelVecEnv.
Training it (k-step windows, the training loop, the noise head, the quality report) is
embodied/world_model/.
"""
