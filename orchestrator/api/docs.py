"""The API docs page: the reference rendered here from the OpenAPI document (`reference`), which
reads at once; and, at `?ui=swagger`, Swagger UI from ninja's files. "ninja" is an installed
app, so the page loads them from our static files (whitenoise), never from a CDN, and keeps its
settings in a non-executable JSON block, as our Content-Security-Policy needs. The OpenAPI
document (and the reference) is built once per process: it takes about half a second and
changes only with the code.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from ninja import NinjaAPI, Swagger
from ninja.openapi.schema import OpenAPISchema

from orchestrator.api import reference

# No badge from the public validator: it would call out of the page (and our CSP refuses it).
SWAGGER_SETTINGS = {"validatorUrl": None}


class CachedSchemaAPI(NinjaAPI):
    """A NinjaAPI whose OpenAPI document is built once for each URL prefix it is served under."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.openapi_built: dict[str, OpenAPISchema] = {}
        self.openapi_lock = threading.Lock()
        self.reference_built: dict[str, str] = {}

    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict[str, Any] | None = None
    ) -> OpenAPISchema:
        if path_prefix is None:
            path_prefix = self.get_root_path(path_params or {})
        with self.openapi_lock:  # a second request waits for the build under way
            if path_prefix not in self.openapi_built:
                built = super().get_openapi_schema(path_prefix=path_prefix)
                self.openapi_built[path_prefix] = built
            return self.openapi_built[path_prefix]

    def reference_page(self, path_params: dict[str, Any], openapi_url: str) -> str:
        """The reference rendered here (`reference`), once per URL prefix as the document is."""
        path_prefix = self.get_root_path(path_params)
        document = self.get_openapi_schema(path_prefix=path_prefix)
        with self.openapi_lock:
            if path_prefix not in self.reference_built:
                info = document.get("info", {})
                context = {
                    "title": info.get("title", ""),
                    "version": info.get("version", ""),
                    "description": info.get("description", ""),
                    "openapi_url": openapi_url,
                    "groups": reference.operations(document),
                    "schemas": reference.schemas(document),
                }
                self.reference_built[path_prefix] = render_to_string("api/reference.html", context)
            return self.reference_built[path_prefix]

    def build_openapi_soon(self, path_params: dict[str, Any]) -> None:
        """Start building the document unless it is built, so that it is ready by the time the
        docs page, which asks for it only once its script has run, does."""
        path_prefix = self.get_root_path(path_params)
        if path_prefix not in self.openapi_built:
            threading.Thread(
                target=self.get_openapi_schema,
                kwargs={"path_prefix": path_prefix},
                name="openapi-build",
                daemon=True,
            ).start()


def _auths(api: NinjaAPI) -> list[Any]:
    return list(api.auth) if isinstance(api.auth, list | tuple) else []


class Docs(Swagger):
    """ninja's Swagger UI page, which also starts building the document it will ask for. Our
    template asks the browser to fetch the document while the UI's script loads (a preload),
    and our script (static/js/api-docs.js) keeps Swagger UI from rebuilding the whole OpenAPI
    3.1 document before it shows the operations."""

    template = "api/docs.html"

    def __init__(self) -> None:
        super().__init__(settings=SWAGGER_SETTINGS)

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        if request.GET.get("ui") != "swagger" and isinstance(api, CachedSchemaAPI):
            return HttpResponse(api.reference_page(kwargs, self.get_openapi_url(api, kwargs)))
        if isinstance(api, CachedSchemaAPI):
            api.build_openapi_soon(kwargs)
        self.settings["url"] = self.get_openapi_url(api, kwargs)
        context = {
            "swagger_settings": json.dumps(self.settings, indent=1),
            "openapi_url": self.settings["url"],
            "api": api,
            "add_csrf": any(getattr(auth, "csrf", False) for auth in _auths(api)),
        }
        return render(request, self.template, context)
