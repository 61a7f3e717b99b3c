"""Dashboard pages (placeholder until the dashboard lands)."""

app_name = "dashboard"
urlpatterns: list = []
