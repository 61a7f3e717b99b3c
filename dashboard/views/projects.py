"""The top bar's project switcher: the project the pages show, kept in the session."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from dashboard.access import PROJECT_SESSION_KEY, VIEW, choose_scope, requires


@requires(VIEW)
@require_POST
def project_switch(request: HttpRequest) -> HttpResponse:
    """Show one project (`project`: its id) or every project the user may see (`project` empty),
    then go back to `next`. A project the user may not see is unknown (404)."""
    scope = choose_scope(request)
    value = request.POST.get("project", "")
    if value:
        wanted = next((p for p in scope.choices if str(p.pk) == value), None)
        if wanted is None:
            raise Http404
        request.session[PROJECT_SESSION_KEY] = wanted.pk
    else:
        request.session.pop(PROJECT_SESSION_KEY, None)
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        back = reverse("dashboard:overview")
    return redirect(back)
