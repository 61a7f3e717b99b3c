"""The OpenAPI document and the docs page, which must work under our CSP without any CDN."""

from __future__ import annotations

import json
import re
import time

import pytest
from django.templatetags.static import static
from ninja import NinjaAPI

from orchestrator.api import api

# Every answer under /api/v1 carries X-Policy-Version, read from the database.
pytestmark = pytest.mark.django_db


def test_the_openapi_document_loads_with_every_operation(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert set(schema["paths"]) >= {
        "/api/v1/runs",
        "/api/v1/runs/batch",
        "/api/v1/runs/{run_id}",
        "/api/v1/policies",
    }
    assert schema["components"]["securitySchemes"]["BearerToken"]["scheme"] == "bearer"
    for name in ("RunIn", "RunOut", "RunBatchIn", "BatchResultOut", "PoliciesOut", "ErrorOut"):
        assert name in json.dumps(schema)


def test_the_docs_page_lists_every_operation_without_a_script(client):
    """The reference is rendered here: the operations read as soon as the HTML arrives (no 1.5 MB
    bundle to run first); Swagger UI stays one link away for trying calls out."""
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<script" not in html
    schema = json.loads(client.get("/api/v1/openapi.json").content)
    for path, item in schema["paths"].items():
        for method, op in item.items():
            heading = f'<span class="method {method}">{method.upper()}</span> <code>{path}</code>'
            assert heading in html, heading
            assert f'id="{op["operationId"]}"' in html
    # Every schema an operation names has its section, linked.
    for name in schema["components"]["schemas"]:
        assert f'id="schema-{name}"' in html
    for ref in re.findall(r'href="#schema-([^"]+)"', html):
        assert f'id="schema-{ref}"' in html, ref
    assert 'class="opblock-tag"' in html  # what benchmarks/docs_page.py waits for
    assert 'href="?ui=swagger"' in html and 'href="/api/v1/openapi.json"' in html
    sources = re.findall(r'(?:src|href)="(/[^"]+)"', html)
    assert all(src.startswith((static(""), "/api/v1/")) for src in sources), sources
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_docs_page_loads_its_scripts_from_our_static_files_not_a_cdn(client):
    response = client.get("/api/v1/docs?ui=swagger")
    assert response.status_code == 200
    html = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    # Swagger UI's files are ninja's, its settings are applied by our script, and the document
    # is preloaded from our API: nothing comes from elsewhere.
    ours = (static("ninja/"), static("js/api-docs.js"), "/api/v1/openapi.json")
    assert sources and all(src.startswith(ours) for src in sources), sources
    assert static("ninja/swagger-ui-bundle.js") in sources
    assert static("js/api-docs.js") in sources
    # No inline script (the CSP allows none): the settings ride in a JSON block.
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts and all("src=" in s or 'type="application/json"' in s for s in scripts)
    settings_block = re.search(r'id="swagger-settings">(.*?)</script>', html, re.S).group(1)
    assert json.loads(settings_block) == {
        "layout": "BaseLayout",
        "deepLinking": True,
        "validatorUrl": None,  # no badge fetched from the public validator
        "url": "/api/v1/openapi.json",
    }
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "cdn" not in csp


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("ninja/swagger-ui-bundle.js", "javascript"),
        ("js/api-docs.js", "javascript"),
        ("ninja/swagger-ui.css", "text/css"),
    ],
)
def test_the_swagger_ui_files_are_static_files(client, name, content_type):
    response = client.get(static(name))
    assert response.status_code == 200
    assert content_type in response["Content-Type"]
    assert response["ETag"]  # a browser revalidates instead of fetching 1.5 MB again
    assert b"".join(response.streaming_content)
    again = client.get(static(name), HTTP_IF_NONE_MATCH=response["ETag"])
    assert again.status_code == 304


def test_the_docs_page_preloads_the_document_its_script_will_fetch(client):
    html = client.get("/api/v1/docs?ui=swagger").content.decode()
    preload = re.search(r"<link ([^>]*rel=\"preload\"[^>]*)>", html)
    assert preload, html
    # as="fetch" with crossorigin: the same request mode and credentials as Swagger UI's fetch,
    # or the browser would fetch the document a second time.
    assert 'href="/api/v1/openapi.json"' in preload.group(1)
    assert 'as="fetch"' in preload.group(1) and "crossorigin" in preload.group(1)
    settings_block = re.search(r'id="swagger-settings">(.*?)</script>', html, re.S).group(1)
    assert json.loads(settings_block)["url"] == "/api/v1/openapi.json"


def test_the_openapi_document_is_built_once_and_the_docs_page_starts_it(client, monkeypatch):
    builds = []
    build = NinjaAPI.get_openapi_schema

    def counted(self, **kwargs):
        builds.append(kwargs)
        return build(self, **kwargs)

    monkeypatch.setattr(NinjaAPI, "get_openapi_schema", counted)
    monkeypatch.setattr(api, "openapi_built", {})
    assert client.get("/api/v1/docs?ui=swagger").status_code == 200
    deadline = time.monotonic() + 10
    while "/api/v1/" not in api.openapi_built and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "/api/v1/" in api.openapi_built  # built while the browser loads the UI's script
    first = client.get("/api/v1/openapi.json")
    second = client.get("/api/v1/openapi.json")
    assert first.content == second.content and len(builds) == 1
