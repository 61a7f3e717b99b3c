"""`manage.py rollups`: backfill the tiles' rollups."""
