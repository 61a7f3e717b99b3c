"""Management commands of the demonstration."""
