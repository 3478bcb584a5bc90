"""AgentStation benchmarks: ``python -m bench [names…]`` (see bench/README.md)."""
