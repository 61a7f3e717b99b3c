"""The API reference as a page rendered here from the OpenAPI document: every operation by tag,
its parameters, body and answers, and every schema's fields. It needs no script, so it reads at
once; Swagger UI (`?ui=swagger`, a 1.5 MB bundle that builds the page in the browser) stays for
trying calls out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

METHODS = ("get", "post", "put", "patch", "delete")
REF_PREFIX = "#/components/schemas/"


@dataclass
class Field:
    name: str
    kind: dict[str, Any]  # `shape()`: text and the schemas it links to
    required: bool = False
    where: str = ""  # a parameter's place: path, query, header
    description: str = ""


@dataclass
class Operation:
    method: str
    path: str
    anchor: str
    summary: str
    description: str
    parameters: list[Field] = field(default_factory=list)
    body: list[Field] = field(default_factory=list)  # one per content type
    responses: list[Field] = field(default_factory=list)


@dataclass
class Schema:
    name: str
    description: str
    fields: list[Field]
    kind: dict[str, Any]


def shape(schema: dict[str, Any] | None) -> dict[str, Any]:
    """A schema as the page names it: {"text": …, "refs": [schema names it links to]}."""
    refs: list[str] = []

    def name(s: dict[str, Any] | None) -> str:
        if not s:
            return "any"
        if "$ref" in s:
            ref = s["$ref"].removeprefix(REF_PREFIX)
            refs.append(ref)
            return ref
        for key in ("anyOf", "oneOf", "allOf"):
            if key in s:
                return " | ".join(name(part) for part in s[key])
        if "enum" in s:
            return "one of " + ", ".join(map(str, s["enum"]))
        kind = s.get("type", "object")
        if kind == "array":
            return f"array of {name(s.get('items'))}"
        if kind == "object" and isinstance(s.get("additionalProperties"), dict):
            return f"object of {name(s['additionalProperties'])}"
        return f"{kind} ({s['format']})" if "format" in s else str(kind)

    return {"text": name(schema), "refs": list(dict.fromkeys(refs))}


def _content(content: dict[str, Any] | None) -> list[Field]:
    return [Field(media, shape(body.get("schema"))) for media, body in (content or {}).items()]


def operations(document: dict[str, Any]) -> list[tuple[str, list[Operation]]]:
    """The document's operations grouped by their first tag, in the document's order."""
    groups: dict[str, list[Operation]] = {}
    for path, item in document.get("paths", {}).items():
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            params = [
                Field(
                    p["name"],
                    shape(p.get("schema")),
                    p.get("required", False),
                    p.get("in", ""),
                    p.get("description", "") or p.get("schema", {}).get("description", ""),
                )
                for p in op.get("parameters", [])
            ]
            body = op.get("requestBody") or {}
            responses = [
                Field(code, shape(_first_schema(r)), description=r.get("description", ""))
                for code, r in op.get("responses", {}).items()
            ]
            anchor = op.get("operationId") or f"{method}-{path}"
            entry = Operation(
                method.upper(), path, anchor, op.get("summary", ""), op.get("description", ""),
                params, _content(body.get("content")), responses,
            )  # fmt: skip
            groups.setdefault((op.get("tags") or ["other"])[0], []).append(entry)
    return list(groups.items())


def _first_schema(response: dict[str, Any]) -> dict[str, Any] | None:
    return next((c.get("schema") for c in response.get("content", {}).values()), None)


def schemas(document: dict[str, Any]) -> list[Schema]:
    found = []
    for name, s in sorted(document.get("components", {}).get("schemas", {}).items()):
        required = set(s.get("required", []))
        fields = [
            Field(prop, shape(sub), prop in required, description=sub.get("description", ""))
            for prop, sub in s.get("properties", {}).items()
        ]
        found.append(Schema(name, s.get("description", ""), fields, shape(s)))
    return found
