"""The MCP endpoint alone as an ASGI app, for test_mcp_asgi.py to serve under an ASGI server:
Django is set up first, as any ASGI entry point does."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from orchestrator.mcp.app import asgi_app  # noqa: E402  # needs the apps loaded above

app = asgi_app()
