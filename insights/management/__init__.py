"""Management commands of the dashboard."""
