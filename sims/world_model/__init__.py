"""A learned world model as a virtual environment (docs/world_model.md).

model.py: the network (encoder, ensemble of latent dynamics members, decoder, heads);
data.py: LeRobot v3 episodes into k-step training windows; train.py: the multi-step
training loop with early stopping; checkpoint.py: save/load; env.py: WorldModelVecEnv;
evaluate.py: the quality report (k-step error against copy-last, success-head AUROC/F1/FPR).
"""
