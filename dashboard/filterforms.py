"""The fields and base form the list pages read their query-string filters with. A value a page
cannot use is refused with a message that names it, never dropped."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.forms.utils import pretty_name
from django.http import QueryDict

from classifier.taxonomy import UnknownFailureType, parse_failure_type
from orchestrator import keyset
from orchestrator.schemas.common import BIGINT_MAX

MAX_VALUES = 20


def canonical_failure_type(name: str, errors: list[str]) -> str:
    """The taxonomy's name for `name` (an alias such as "auth_error" included), or "" with the
    reason added to `errors`; "" for no name."""
    try:
        return FailureTypeField(required=False).clean(name)
    except ValidationError as exc:
        errors.extend(exc.messages)
        return ""


class QueryForm(forms.Form):
    """A page's filters, always bound (an empty query is no filter). A field's label names it
    in its error messages."""

    use_required_attribute = False

    def __init__(self, data: QueryDict | None = None, **kwargs: Any) -> None:
        super().__init__(data if data is not None else QueryDict(), **kwargs)
        for name, field in self.fields.items():
            field.required = False
            field.label = field.label or pretty_name(name)

    @property
    def error_texts(self) -> list[str]:
        """Every refusal, in the order of the fields, then those of the whole form."""
        return [text for errors in self.errors.values() for text in errors]


class ValuesWidget(forms.TextInput):
    """Several values in one field: repeated keys and comma-separated values both work."""

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        raws = data.getlist(name) if hasattr(data, "getlist") else [data.get(name) or ""]
        return [v.strip() for raw in raws for v in raw.split(",") if v.strip()]

    def format_value(self, value: Any) -> str | None:
        return ",".join(value) if isinstance(value, list) else super().format_value(value)


class ValuesField(forms.Field):
    """A list of names, the first MAX_VALUES kept."""

    widget = ValuesWidget

    def __init__(self, *, max_values: int = MAX_VALUES, **kwargs: Any) -> None:
        self.max_values = max_values
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[str]:
        return list(value or [])[: self.max_values]


NOT_ONE_OF = "%(noun)s %(value)s is not one of: %(allowed)s."


def _not_one_of(field: forms.Field, wrong: list[str]) -> ValidationError:
    """The refusal of `wrong` values by a field of a closed list, naming what it allows."""
    choices: Iterable[tuple[Any, Any]] = getattr(field, "choices", [])
    params = {
        "noun": str(field.label).lower(),
        "value": ", ".join(map(repr, wrong)),
        "allowed": ", ".join(str(value) for value, _ in choices if value != ""),
    }
    return ValidationError(
        field.error_messages["invalid_choice"], code="invalid_choice", params=params
    )


class ChoiceListField(ValuesField):
    """Several values of a closed list; every value outside it is named in one message."""

    default_error_messages = {"invalid_choice": NOT_ONE_OF}

    def __init__(self, choices: Iterable[tuple[str, Any]], **kwargs: Any) -> None:
        self.choices = list(choices)
        super().__init__(**kwargs)

    def validate(self, value: list[str]) -> None:
        known = {str(v) for v, _ in self.choices}
        if wrong := [v for v in value if v not in known]:
            raise _not_one_of(self, wrong)


class OneOfField(forms.TypedChoiceField):
    """One value of a closed list, or `empty_value` when the query has none."""

    default_error_messages = {"invalid_choice": NOT_ONE_OF}

    def to_python(self, value: Any) -> str:
        return super().to_python(value).strip()

    def validate(self, value: str) -> None:
        if value and not self.valid_value(value):
            raise _not_one_of(self, [value])


class FailureTypeField(forms.CharField):
    """A failure type's canonical name; an alias ("auth_error") reads as its category."""

    def to_python(self, value: Any) -> str:
        name = super().to_python(value)
        if not name:
            return ""
        try:
            return parse_failure_type(name).value
        except UnknownFailureType as exc:
            raise ValidationError(str(exc), code="invalid") from None


class FailureTypesField(ValuesField):
    """Several failure types, each read as FailureTypeField reads one, duplicates dropped."""

    def to_python(self, value: Any) -> list[str]:
        one, names, errors = FailureTypeField(required=False), [], []
        for raw in super().to_python(value):
            try:
                names.append(one.clean(raw))
            except ValidationError as exc:
                errors.append(exc)
        if errors:
            raise ValidationError(errors)
        return list(dict.fromkeys(names))


class IdField(forms.Field):
    """A row's id: digits that fit a bigint (a larger number would fail in the database)."""

    default_error_messages = {"invalid": "%(noun)s %(value)r is not %(what)s (a number)."}

    def __init__(self, *, what: str, **kwargs: Any) -> None:
        self.what = what
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> int | None:
        raw = (value or "").strip()
        if not raw:
            return None
        if raw.isdigit() and int(raw) <= BIGINT_MAX:
            return int(raw)
        params = {"noun": str(self.label).lower(), "value": raw, "what": self.what}
        raise ValidationError(self.error_messages["invalid"], code="invalid", params=params)


class TraceIdField(forms.CharField):
    """An OpenTelemetry trace id (32 hex digits, any case), in lower case."""

    default_error_messages = {"invalid": "%(noun)s %(value)r is not a trace id (32 hex digits)."}

    def to_python(self, value: Any) -> str:
        raw = super().to_python(value)
        lowered = raw.lower()
        if not raw or (len(lowered) == 32 and not lowered.strip("0123456789abcdef")):
            return lowered
        params = {"noun": str(self.label).lower(), "value": raw}
        raise ValidationError(self.error_messages["invalid"], code="invalid", params=params)


class MomentField(forms.DateTimeField):
    """A date and time as a datetime-local input sends it; without an offset, in the current
    time zone (the one the page shows times in)."""

    default_error_messages = {
        "invalid": "“%(label)s” %(value)r is not a date and time (YYYY-MM-DDTHH:MM)."
    }

    def to_python(self, value: Any) -> datetime | None:
        try:
            return super().to_python(value)
        except ValidationError:
            params = {"label": self.label, "value": str(value).strip()}
            raise ValidationError(
                self.error_messages["invalid"], code="invalid", params=params
            ) from None


class ClippedField(forms.CharField):
    """Free text cut to `clip` characters: a longer text is searched by its start."""

    def __init__(self, *, clip: int, **kwargs: Any) -> None:
        self.clip = clip
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> str:
        return super().to_python(value)[: self.clip]


class CursorField(forms.Field):
    """A keyset page link's position (`orchestrator.keyset`)."""

    default_error_messages = {
        "invalid": "This page link is damaged: start again from the first page."
    }

    def to_python(self, value: Any) -> tuple[datetime, int] | None:
        if not value:
            return None
        try:
            return keyset.decode_cursor(value)
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None
