"""Template tags of the dashboard (`{% load dashboard %}`): badges, sparklines, ages."""
