"""Management commands of the orchestrator."""
