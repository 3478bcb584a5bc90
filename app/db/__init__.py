"""Persistence: SQLAlchemy 2 async models and the engine/session factory."""
