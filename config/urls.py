"""Root URLs. The dashboard is included by its dotted name: nothing imports the pages."""

from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic.base import RedirectView

from insights.metrics import metrics
from orchestrator.api import urls as api_urls
from orchestrator.api.errors import not_found

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    # Agents never get Django's HTML 404: any other /api/ path answers in the JSON envelope.
    re_path(r"^api/", not_found),
    path("accounts/", include("django.contrib.auth.urls")),
    path("metrics", metrics, name="metrics"),
    path("favicon.ico", RedirectView.as_view(url=static("favicon.svg"), permanent=True)),
    path("", include("dashboard.urls")),
]
