"""The request path of an API operation passes through none of the pages' middleware (sessions,
CSRF, sign-in, messages, clickjacking, htmx, CSP, the login lock), while pages, the API's own
docs page among them, still pass through all of them."""

from __future__ import annotations

from csp.middleware import CSPMiddleware
from django.conf import settings
from django.contrib.sessions.middleware import SessionMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import reverse

from dashboard import middleware
from tests.api.helpers import ok_run, post_json

PAGE_HEADERS = ("Content-Security-Policy", "X-Frame-Options")


def test_a_report_is_answered_without_any_of_the_pages_headers_or_cookies(client, auth_headers):
    client.cookies["sessionid"] = "a-session-a-browser-still-sends"
    response = post_json(client, "/runs", ok_run(), **auth_headers)
    assert response.status_code == 201, response.content
    assert [name for name in PAGE_HEADERS if response.has_header(name)] == []
    assert "Cookie" not in response.get("Vary", "")  # no session was read
    assert not response.cookies


def test_an_api_post_needs_no_csrf_token_even_with_a_session_cookie(client, auth_headers):
    client.cookies["sessionid"] = "x"
    client.handler.enforce_csrf_checks = True
    response = post_json(client, "/runs", ok_run(), **auth_headers)
    assert response.status_code == 201, response.content


def test_pages_and_the_api_docs_page_keep_the_pages_middleware(client, operator, db):
    client.force_login(operator)  # a session, as sign-in leaves it
    page = client.get(reverse("dashboard:overview"))
    assert page.status_code == 200
    assert all(page.has_header(name) for name in PAGE_HEADERS)
    docs = client.get("/api/v1/docs")
    assert "script-src 'self'" in docs["Content-Security-Policy"]


def test_every_pages_middleware_in_the_settings_is_the_pages_only_kind():
    skipped = {
        "SessionMiddleware",
        "CsrfViewMiddleware",
        "AuthenticationMiddleware",
        "MessageMiddleware",
        "XFrameOptionsMiddleware",
        "HtmxMiddleware",
        "CSPMiddleware",
        "AxesMiddleware",
    }
    named = {path.rsplit(".", 1)[1]: path for path in settings.MIDDLEWARE}
    assert {named[name] for name in skipped} == {f"dashboard.middleware.{n}" for n in skipped}
    # Each is the library's own class (Django's admin and system checks find them by that).
    assert issubclass(middleware.SessionMiddleware, SessionMiddleware)
    assert issubclass(middleware.CsrfViewMiddleware, CsrfViewMiddleware)
    assert issubclass(middleware.CSPMiddleware, CSPMiddleware)
