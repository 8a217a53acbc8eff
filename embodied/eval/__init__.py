"""Evaluation: success rates, sim-to-real sweeps, statistics, reports and videos."""
