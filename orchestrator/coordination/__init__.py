"""The coordinator: what happens after a subagent runs, one concern per module."""
