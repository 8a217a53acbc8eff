"""A learned world model as a virtual environment (docs/world_model.md).

model.py: the network (encoder, ensemble of latent dynamics members, decoder, heads);
vision.py: with cameras, the conv encoder of the frames and the decoder back to them;
data.py: LeRobot v3 episodes into k-step training windows; train.py: the multi-step
training loop with early stopping; checkpoint.py: save/load; env.py: WorldModelVecEnv;
evaluate.py: the quality report (k-step error against copy-last, pixel MSE/PSNR with cameras,
success-head AUROC/F1/FPR).
"""
