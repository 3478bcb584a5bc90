"""Every stored agent as an A2A server (``/a2a/{agent}/``), on the official ``a2a-sdk``.

An A2A context is a session (its id is the session id), an A2A task is a run: the SDK's
JSON-RPC transport calls ``RunsRequestHandler``, which drives the same sessions, runs and
event log as the REST API. See docs/interop.md.
"""
