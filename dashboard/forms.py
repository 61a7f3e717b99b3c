"""Forms of the dashboard's actions. Model forms run the model's clean() (and full_clean) so the
policies page shows the same validation errors as the admin, inline."""

from __future__ import annotations

import json
import re
from typing import Any

from django import forms

from orchestrator.coordination.actions import RunAction
from orchestrator.models import FailureType, ProviderOverride, ReviewItem, RoutingPolicy

MAX_BULK = 500


class DeadlineField(forms.CharField):
    """A review deadline as the policies table shows it: hours ("4", "1.5") or a number with a
    unit ("90m", "4 h", "2d", "600s"); kept in seconds, as the model and the API have it."""

    UNITS = {"s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}
    PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|m|h|d)?\s*$", re.IGNORECASE)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, int):  # the stored seconds, shown in hours
            return f"{value / 3600:g}"
        return value

    def to_python(self, value: Any) -> int | None:
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        match = self.PATTERN.match(value)
        if not match:
            raise forms.ValidationError(
                "Enter hours (4 or 1.5) or a number with a unit: 90m, 4h, 2d.", code="invalid"
            )
        unit = (match.group(2) or "h").lower()
        return round(float(match.group(1)) * self.UNITS[unit])


class RoutingPolicyForm(forms.ModelForm):
    class Meta:
        model = RoutingPolicy
        fields = [
            "max_attempts",
            "base_delay",
            "max_delay",
            "multiplier",
            "jitter",
            "action_when_exhausted",
            "hard_fail",
            "review_deadline",
            "review_fallback",
            "over_budget_action",
            "refresh_credentials",
        ]
        widgets = {
            "base_delay": forms.NumberInput(attrs={"step": "any"}),
            "max_delay": forms.NumberInput(attrs={"step": "any"}),
            "multiplier": forms.NumberInput(attrs={"step": "any"}),
        }

    note = forms.CharField(required=False, max_length=300, help_text="Why (kept in the history)")

    review_deadline = DeadlineField(
        label="Review deadline (hours)",
        help_text="How long a review item may wait before its fallback applies: hours, or "
        "with a unit (90m, 2d)",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # A form from before the field existed (a page left open) keeps the row's value.
        self.fields["over_budget_action"].required = False

    def clean_over_budget_action(self) -> str:
        return self.cleaned_data.get("over_budget_action") or self.instance.over_budget_action


class ProviderOverrideForm(forms.ModelForm):
    class Meta:
        model = ProviderOverride
        fields = [
            "provider",
            "match_on",
            "match_value",
            "failure_type",
            "retryable",
            "note",
            "enabled",
        ]
        widgets = {
            "retryable": forms.Select(
                choices=[("", "type default"), ("true", "retryable"), ("false", "not retryable")]
            )
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["retryable"] = forms.NullBooleanField(
            required=False, widget=self.Meta.widgets["retryable"]
        )


class IdListField(forms.Field):
    """Repeated `run=<id>` values; the view scopes them to what the user may see."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[int]:
        try:
            ids = sorted({int(v) for v in value or []})
        except (TypeError, ValueError):
            raise forms.ValidationError("Run ids are numbers.") from None
        if len(ids) > MAX_BULK:
            raise forms.ValidationError(f"At most {MAX_BULK} runs at a time.")
        return ids

    def validate(self, value: list[int]) -> None:
        if not value:
            raise forms.ValidationError("Select at least one run.")


class BulkActionForm(forms.Form):
    action = forms.ChoiceField(choices=RunAction.choices())
    run = IdListField()
    reason = forms.CharField(required=False, max_length=500)
    # Set by the confirmation page (cancels and actions on several runs ask first).
    confirmed = forms.BooleanField(required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        data["reason"] = " ".join(data.get("reason", "").split())
        if data.get("action") == RunAction.ESCALATE and not data["reason"]:
            self.add_error("reason", "Say why you escalate: the reviewer reads it first.")
        return data


class ResolveForm(forms.Form):
    """A resolution of a review item; `options` (from `review.resolution_options`) are the ones
    offered, and a resolution that cannot work is refused with the reason why."""

    resolution = forms.ChoiceField(choices=ReviewItem.Resolution.choices, widget=forms.RadioSelect)
    note = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}), max_length=2000)
    edited_input = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
        help_text="JSON object sent instead of the original input (retry with edited input)",
    )
    failure_type = forms.ChoiceField(
        required=False,
        choices=[("", "— keep unclassified —"), *FailureType.choices],
        help_text="What this failure really was",
    )
    save_override = forms.BooleanField(
        required=False, label="Save as a provider override for this signal"
    )
    apply_to_group = forms.BooleanField(required=False)

    def __init__(self, *args: Any, options: list[Any] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.options = options or []

    def clean_resolution(self) -> str:
        value = self.cleaned_data["resolution"]
        option = next((o for o in self.options if o.value == value), None)
        if option is None and self.options:
            raise forms.ValidationError("This resolution is not offered for this item.")
        if option is not None and not option.available:
            raise forms.ValidationError(f"“{option.label}” cannot work here: {option.why}")
        return value

    def clean_edited_input(self) -> dict | None:
        raw = self.cleaned_data["edited_input"].strip()
        if not raw:
            return None
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg} (line {exc.lineno}).") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("The edited input must be a JSON object.")
        return value

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        retry_edited = ReviewItem.Resolution.RETRY_EDITED
        if data.get("resolution") == retry_edited and not data.get("edited_input"):
            self.add_error("edited_input", "Retry with edited input needs the edited input.")
        if data.get("save_override") and not data.get("failure_type"):
            self.add_error("failure_type", "Choose the failure type the override maps to.")
        return data
