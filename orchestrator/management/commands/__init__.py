"""`manage.py createtoken`: issue an API token."""
