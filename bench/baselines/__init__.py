"""Baseline servers the gateway is measured against: the floors for a Python service."""
