"""REST API v1 (placeholder until the ingest API lands)."""

from ninja import NinjaAPI

api = NinjaAPI(title="Failsight API", version="1", urls_namespace="api")
