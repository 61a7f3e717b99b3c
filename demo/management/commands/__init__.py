"""`manage.py launch` (the main job) and `manage.py demo`."""
