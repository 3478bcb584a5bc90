"""The one cell of bench/agentic.py's sessions, shared by both sides (no imports: the client
side runs in the Agents SDK's venv, which cannot import this project).

The tool's parameter schema pins ``command`` to ``CELL`` (a one-value ``enum``); both sides
force a call of the tool (a named ``tool_choice``), so the engine's structured outputs make the
model write exactly this JSON, token by token (greedy, every token a decoding step), whatever
its random weights. The cell reads and bumps a counter in the kernel, so step k runs k's work
and prints k's result: ``k``, then a sum that takes a few ms more at each step.
"""

TOOL_NAME = "IPythonBenchCell"
DESCRIPTION = "Execute Python code in a Jupyter notebook environment."
CELL = "k = globals().get('k', 0) + 1\nprint(k, sum(i * i for i in range(k * 20000)))"
PARAMETERS = {
    "type": "object",
    "properties": {"command": {"type": "string", "enum": [CELL], "description": "Python code"}},
    "required": ["command"],
    "additionalProperties": False,
}


def expected_output(step: int) -> str:
    """What the cell prints at step ``step`` (1-based)."""
    return f"{step} {sum(i * i for i in range(step * 20000))}"
