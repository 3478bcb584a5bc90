"""Operational pieces: rate limits, budgets, metrics, structured logs and retention."""
