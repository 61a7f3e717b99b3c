"""The OpenAPI document and the docs page, which must work under our CSP without any CDN."""

from __future__ import annotations

import json
import re

import pytest

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


def test_the_docs_page_loads_its_scripts_from_us_not_a_cdn(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(src.startswith("/api/v1/docs/assets/") for src in sources)
    assert "<script>" not in html  # no inline script: the CSP allows none
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp
    assert "cdn" not in csp


@pytest.mark.parametrize(
    ("name", "content_type"),
    [
        ("swagger-ui-bundle.js", "javascript"),
        ("swagger-ui-init.js", "javascript"),
        ("swagger-ui.css", "text/css"),
    ],
)
def test_the_docs_assets_are_served(client, name, content_type):
    response = client.get(f"/api/v1/docs/assets/{name}")
    assert response.status_code == 200
    assert content_type in response["Content-Type"]
    assert b"".join(response.streaming_content)


def test_only_the_docs_assets_are_served(client):
    response = client.get("/api/v1/docs/assets/..%2F..%2Fmain.py")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")
