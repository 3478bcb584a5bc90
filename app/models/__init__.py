"""Configured models: handles built from ``MODELS`` by their backend (app/models/backends.py)."""
