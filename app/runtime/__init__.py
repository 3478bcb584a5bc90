"""Running agents: the spec registry, the runner, the run manager and the event log."""
