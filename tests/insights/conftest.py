"""The insights tests build runs with the dashboard tests' factories and sign in with their
clients (the pages are where some of these counts are seen)."""

from tests.dashboard.conftest import (  # noqa: F401
    ago,
    editor_client,
    make_failure,
    make_review,
    make_run,
    make_workflow,
    operator_client,
    outsider_client,
    signed_in,
)
