"""Deployment: serving a trained policy (`embodied serve`)."""
