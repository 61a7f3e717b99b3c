"""The query-string fields the runs list, the review queue and the failure groups page share."""

from __future__ import annotations

from datetime import UTC, datetime

from django.http import QueryDict
from django.urls import reverse
from django.utils import timezone

from dashboard.filterforms import (
    ChoiceListField,
    CursorField,
    FailureTypesField,
    IdField,
    MomentField,
    OneOfField,
    QueryForm,
)
from orchestrator import keyset


class Sample(QueryForm):
    status = ChoiceListField([("a", "A"), ("b", "B")])
    failure_type = FailureTypesField()
    view = OneOfField(choices=[("list", "List"), ("groups", "Groups")], empty_value="list")
    workflow = IdField(what="a workflow id")
    since = MomentField(label="From")
    after = CursorField()


def test_an_empty_query_is_no_filter():
    form = Sample()
    assert form.is_valid()
    assert form.cleaned_data == {
        "status": [],
        "failure_type": [],
        "view": "list",
        "workflow": None,
        "since": None,
        "after": None,
    }


def test_repeated_keys_and_comma_separated_values_both_give_several():
    form = Sample(QueryDict("status=a,b&status= b &failure_type=auth_error,timeout,auth_failure"))
    assert form.is_valid()
    assert form.cleaned_data["status"] == ["a", "b", "b"]
    assert form.cleaned_data["failure_type"] == ["auth_failure", "timeout"]


def test_every_value_outside_the_list_is_named_and_none_is_dropped_silently():
    form = Sample(QueryDict("status=a,x,y&view=grid&failure_type=meteor"))
    assert not form.is_valid()
    assert form.error_texts[0] == "status 'x', 'y' is not one of: a, b."
    assert form.error_texts[1].startswith("'meteor' is not a failure type")
    assert form.error_texts[2] == "view 'grid' is not one of: list, groups."


def test_an_id_the_database_cannot_hold_is_refused():
    assert Sample(QueryDict(f"workflow={2**63 - 1}")).is_valid()
    too_big = Sample(QueryDict(f"workflow={2**63}"))
    assert too_big.error_texts == [f"workflow '{2**63}' is not a workflow id (a number)."]


def test_a_time_without_an_offset_is_read_in_the_time_zone_the_page_shows():
    with timezone.override("Europe/Paris"):
        form = Sample(QueryDict("since=2025-06-01T12:00"))
        assert form.is_valid()
    assert form.cleaned_data["since"] == datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
    refused = Sample(QueryDict("since=yesterday"))
    assert refused.error_texts == ["“From” 'yesterday' is not a date and time (YYYY-MM-DDTHH:MM)."]


def test_a_page_link_reads_back_its_position_and_a_damaged_one_is_refused():
    key = (datetime(2025, 6, 1, tzinfo=UTC), 42)
    form = Sample(QueryDict(f"after={keyset.encode_cursor(key)}"))
    assert form.is_valid() and form.cleaned_data["after"] == key
    assert Sample(QueryDict("after=%00x")).error_texts == [
        "This page link is damaged: start again from the first page."
    ]


def test_the_queue_refuses_a_workflow_id_too_large_for_the_database(operator_client):
    response = operator_client.get(reverse("dashboard:review_queue") + f"?workflow={2**64}")
    assert response.status_code == 400 and "is not a workflow id" in response.content.decode()
