"""The API docs page (Swagger UI) under our Content-Security-Policy, with no CDN: ninja loads it
from jsdelivr unless "ninja" is in INSTALLED_APPS, which our CSP blocks. The files bundled with
ninja are served here; the settings ride in a non-executable JSON block, so no inline script.
"""

from __future__ import annotations

import json
import mimetypes
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ninja
from django.http import FileResponse, HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import escape
from django.views.decorators.http import require_GET
from ninja.openapi.docs import DocsBase

from orchestrator.api.errors import not_found

if TYPE_CHECKING:
    from ninja import NinjaAPI

ASSET_DIR = Path(ninja.__file__).parent / "static" / "ninja"
ASSETS = frozenset({"swagger-ui-bundle.js", "swagger-ui-init.js", "swagger-ui.css", "favicon.png"})

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>{title}</title>
  <link rel="stylesheet" href="{assets}swagger-ui.css">
  <link rel="icon" href="{assets}favicon.png">
</head>
<body data-csrf-token="" data-api-csrf="">
  <script type="application/json" id="swagger-settings">{settings}</script>
  <div id="swagger-ui"></div>
  <script src="{assets}swagger-ui-bundle.js"></script>
  <script src="{assets}swagger-ui-init.js"></script>
</body>
</html>
"""


class LocalSwagger(DocsBase):
    """Swagger UI from the files bundled with ninja, served by `docs_asset`."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        assets = reverse(f"{api.urls_namespace}:docs-asset", kwargs={"name": "x"})[:-1]
        config = {"url": self.get_openapi_url(api, kwargs), "layout": "BaseLayout"}
        # "<" escaped so that no value can close the JSON block early.
        settings = json.dumps(config).replace("<", "\\u003c")
        html = PAGE.format(title=escape(api.title), assets=assets, settings=settings)
        return HttpResponse(html)


@require_GET
def docs_asset(request: HttpRequest, name: str) -> HttpResponse:
    """One of the whitelisted Swagger UI files (never a path from the request)."""
    if name not in ASSETS:
        return not_found(request)
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    response = FileResponse((ASSET_DIR / name).open("rb"), content_type=content_type)
    response["Cache-Control"] = "public, max-age=86400"
    return response
