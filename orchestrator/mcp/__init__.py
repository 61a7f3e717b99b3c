"""Failsight's MCP tools served by the web server: `app.asgi_app()` is the streamable HTTP
endpoint, `services.InProcess` answers the tools with the REST API's own services."""
