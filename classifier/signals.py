"""Reading an exception and the exceptions it carries into evidence nodes. Reading is pure:
attributes and in-memory headers only, and an attribute that raises when read counts as absent."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from types import MappingProxyType
from typing import Any, Final, TypeVar

from classifier import protocols, rules
from classifier.protocols import CodeSource, Read
from classifier.retry_after import MAX_RETRY_AFTER
from classifier.taxonomy import FailureCategory

MAX_CHAIN: Final = 32
MAX_DEPTH: Final = 16
MESSAGE_LIMIT: Final = 300
# Where libraries keep the underlying exception (urllib, urllib3, SQLAlchemy, google-api-core,
# aiohttp), or containers of them (paramiko's per-address dict, tenacity's last attempt).
LINK_ATTRIBUTES: Final = (
    "reason",
    "orig",
    "cause",
    "os_error",
    "certificate_error",
    "errors",
    "last_attempt",
)
READ_ATTRIBUTES: Final = frozenset(
    {
        "status_code",
        "status",
        "http_status",
        "code",
        "grpc_status_code",
        "response",
        "headers",
        "body",
        "error_code",
        "type",
        "sqlstate",
        "pgcode",
        "retryable",
        "retry_after",
        "details",
        *LINK_ATTRIBUTES,
    }
)
# Responses whose body is in memory under this attribute (reading it does no I/O), by class:
# httpx raises ResponseNotRead for an unread body; requests would read the socket, so it is absent.
RESPONSE_BODIES: Final = MappingProxyType(
    {"httpx.Response": "content", "websockets.http11.Response": "body"}
)
# Bounded: botocore creates exception classes per client.
CLASS_CACHE_SIZE: Final = 2048
UNPRINTABLE: Final = "<unprintable message>"

Getter = Callable[[str], Any]
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ExceptionClass:
    name: str
    qualname: str
    names: tuple[str, ...]  # the names an override may match, for every class of the MRO
    category: FailureCategory | None
    name_category: FailureCategory | None  # what the first telling non-builtin name suggests
    fallback: FailureCategory | None  # a broad class, which speaks only after the message
    grpc: bool
    code_is_evidence: bool  # False where `code` is an exit status or an alias
    # With an instance's __dict__, the only READ_ATTRIBUTES it can have (unless it answers any).
    attributes: frozenset[str] = frozenset()
    answers_any_name: bool = False
    code_source: CodeSource | None = None
    readable: frozenset[str] = READ_ATTRIBUTES


@dataclass(slots=True)
class Node:
    kind: ExceptionClass
    message: str
    status: int | None = None
    codes: tuple[str, ...] = ()
    grpc: str | None = None
    sqlstate: str | None = None
    headers: Any = None  # the response's header map, scanned only when the Failure is built
    flag: bool | None = None
    delay: float | None = None
    body: Any = None  # an error body (parsed or text), read for a delay only when no header says


@lru_cache(maxsize=CLASS_CACHE_SIZE)
def exception_class(cls: type) -> ExceptionClass:
    """Return what the rules say about exception class `cls`, from its MRO (cached per class)."""
    try:
        mro = tuple(cls.__mro__)
    except Exception:
        mro = (cls,)
    return _describe(
        [_module_and_qualname(klass) for klass in mro],
        attributes=_defined_attributes(cls),
        answers_any_name=_answers_any_name(mro),
    )


@lru_cache(maxsize=CLASS_CACHE_SIZE)
def exception_class_named(name: str) -> ExceptionClass:
    """Return what the rules say about a class known only by its name ("httpx.ReadTimeout")."""
    module, _, qualname = name.rpartition(".")
    if module in ("", "builtins"):
        candidate = getattr(builtins, qualname, None)
        if isinstance(candidate, type) and issubclass(candidate, BaseException):
            return exception_class(candidate)
    return _describe([(module, qualname)])


def class_name(cls: Any) -> str:
    """Return "module.QualName" of a class ("?" for a part it does not tell)."""
    module, qualname = _module_and_qualname(cls)
    return f"{module}.{qualname}"


def _module_and_qualname(klass: Any) -> tuple[str, str]:
    module = getattr(klass, "__module__", None)
    qualname = getattr(klass, "__qualname__", None)
    return (
        module if isinstance(module, str) else "?",
        qualname if isinstance(qualname, str) else "?",
    )


def _defined_attributes(cls: type) -> frozenset[str]:
    try:
        return frozenset(name for name in READ_ATTRIBUTES if hasattr(cls, name))
    except Exception:
        return READ_ATTRIBUTES


def _answers_any_name(mro: tuple[type, ...]) -> bool:
    try:
        return any(
            "__getattr__" in vars(klass) or "__getattribute__" in vars(klass)
            for klass in mro
            if klass not in (BaseException, object)
        )
    except Exception:
        return True


def _describe(
    classes: list[tuple[str, str]],
    attributes: frozenset[str] = frozenset(),
    answers_any_name: bool = False,
) -> ExceptionClass:
    looked_up = [_lookup_names(module, qualname) for module, qualname in classes]
    names = [
        name
        for (full, short), (_, qualname) in zip(looked_up, classes, strict=True)
        for name in (full, short, qualname)
    ]
    code_is_evidence = all(full not in rules.CODE_IS_NOT_EVIDENCE for full, _ in looked_up)
    readable = READ_ATTRIBUTES if code_is_evidence else READ_ATTRIBUTES - {"code"}
    return ExceptionClass(
        name=looked_up[0][0],
        qualname=classes[0][1],
        names=tuple(dict.fromkeys(names)),
        category=_first_entry(rules.EXCEPTION_TYPES, looked_up),
        name_category=_name_category(classes),
        fallback=_first_entry(rules.FALLBACK_TYPES, looked_up),
        grpc=any(short == "grpc.RpcError" for _, short in looked_up),
        code_is_evidence=code_is_evidence,
        attributes=attributes & readable,
        answers_any_name=answers_any_name,
        code_source=_first_entry(protocols.CODE_SOURCES, looked_up),
        readable=readable,
    )


def _lookup_names(module: str, qualname: str) -> tuple[str, str]:
    if not module:
        return qualname, qualname
    return f"{module}.{qualname}", f"{module.partition('.')[0]}.{qualname}"


def _first_entry(table: Mapping[str, V], looked_up: list[tuple[str, str]]) -> V | None:
    for full, short in looked_up:
        category = table.get(full) or table.get(short)
        if category is not None:
            return category
    return None


def _name_category(classes: list[tuple[str, str]]) -> FailureCategory | None:
    for module, qualname in classes:
        if module != "builtins":
            category = rules.class_name_category(qualname.rpartition(".")[2])
            if category is not None:
                return category
    return None


def read_chain(root: Any) -> list[Node]:
    """Return the nodes of `root` and of the exceptions linked to it, breadth first, each once.

    A loop, not a recursion, so that no chain can exhaust the stack.
    """
    node, links = read_exception(root)
    nodes = [node]
    seen = {id(root)}
    level = [links]
    for _ in range(MAX_DEPTH):
        next_level = []
        for links in level:
            for linked in links:
                if id(linked) in seen:
                    continue
                seen.add(id(linked))
                node, further = read_exception(linked)
                nodes.append(node)
                if len(nodes) >= MAX_CHAIN:
                    return nodes
                next_level.append(further)
        if not next_level:
            break
        level = next_level
    return nodes


def read_exception(exc: Any) -> tuple[Node, list[BaseException]]:
    """Return the evidence on one exception, and the exceptions it carries."""
    kind = exception_class(type(exc))
    message = message_of(exc)
    present = _present_attributes(exc, kind)
    get: Getter = {name: attribute(exc, name) for name in present}.get if present else _absent
    links = _linked_exceptions(exc, get, present)
    if not present and kind.code_source is None:  # most exceptions: class and message speak
        return Node(kind, message), links
    try:
        node = _read_evidence(get, kind, message) if present else Node(kind, message)
        if kind.code_source is not None:
            node.codes = (*_source_codes(exc, kind.code_source, message), *node.codes)
        return node, links
    except Exception:  # evidence that cannot be read (a hostile value) counts as absent
        return Node(kind, message), links


def _absent(name: str) -> None:
    return None


def _present_attributes(exc: Any, kind: ExceptionClass) -> frozenset[str]:
    if kind.answers_any_name:
        return kind.readable
    try:
        present = kind.readable.intersection(vars(exc))
    except Exception:  # no __dict__: only what the class defines (slots) exists
        present = frozenset()
    return present | kind.attributes


def _linked_exceptions(exc: Any, get: Getter, present: frozenset[str]) -> list[BaseException]:
    try:
        candidates = [exc.__cause__, exc.__context__]
    except Exception:  # a hostile property: no chain to follow
        candidates = []
    if not present.isdisjoint(LINK_ATTRIBUTES):
        for name in LINK_ATTRIBUTES:
            value = get(name)
            if value is not None:
                candidates.extend(_carried(value))
    if isinstance(exc, BaseExceptionGroup):
        candidates.extend(exc.exceptions[:MAX_CHAIN])
    return [candidate for candidate in candidates if isinstance(candidate, BaseException)]


def _carried(value: Any) -> list[Any]:
    if isinstance(value, BaseException):
        return [value]
    if isinstance(value, Future):
        try:
            return [value.exception(timeout=0)] if value.done() else []
        except Exception:  # cancelled, or a future that defeats reading
            return []
    if type(value) is dict:
        return list(islice(value.values(), MAX_CHAIN))
    if type(value) in (list, tuple):
        return list(value[:MAX_CHAIN])
    return []


def _source_codes(exc: Any, source: CodeSource, message: str) -> tuple[str, ...]:
    if source.read is Read.MESSAGE_PREFIX:
        code = protocols.reply_code_opening(message)
    elif source.read is Read.SERVER_MESSAGE:
        code = protocols.sqlstate_in_message(message)
    elif source.read is Read.PER_ADDRESS:
        replies = attribute(exc, source.attribute)
        if type(replies) is not dict:
            return ()
        return tuple(
            str(reply[0])
            for reply in islice(replies.values(), MAX_CHAIN)
            if type(reply) is tuple and reply and _is_code(reply[0])
        )
    else:
        if source.read is Read.FIRST_ARG:
            args = attribute(exc, "args")
            value = args[0] if type(args) is tuple and args else None
        else:
            value = attribute(exc, source.attribute)
        code = str(value) if _is_code(value) else None
    return (code,) if code else ()


def _is_code(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return type(value) is int or (isinstance(value, str) and 0 < len(value) <= 64)


def message_of(exc: Any) -> str:
    """Return str(exc) cut to MESSAGE_LIMIT characters, or a placeholder if str() fails."""
    try:
        text = str(exc)
    except Exception:
        return UNPRINTABLE
    if type(text) is not str:
        return UNPRINTABLE
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def attribute(obj: Any, name: str) -> Any:
    """Return obj.name, or None if it is missing or reading it raises."""
    try:
        return getattr(obj, name, None)
    except Exception:
        return None


def _read_evidence(get: Getter, kind: ExceptionClass, message: str) -> Node:
    code = get("code") if kind.code_is_evidence else None
    response = get("response")
    # botocore's ClientError carries the parsed reply as a dict; other libraries a response.
    reply = _botocore_reply(response) if type(response) is dict else (None, None, None)
    return Node(
        kind,
        message,
        status=_status(get, code, response, reply[1]),
        codes=_codes(get, code, reply[0]),
        grpc=_grpc_status(get, code, kind),
        sqlstate=_text(get("pgcode")) or _text(get("sqlstate")),  # psycopg2's, psycopg's
        headers=_headers(get, response, reply[2]),
        flag=_flag(get("retryable")),
        delay=_delay(get("retry_after")),
        body=_body(get, response),
    )


def _status(get: Getter, code: Any, response: Any, reply_status: Any) -> int | None:
    for name in ("status_code", "status", "http_status"):
        status = as_status(get(name))
        if status is not None:
            return status
    if isinstance(code, int) and not callable(code):  # urllib's HTTPError, google-api-core
        status = as_status(code)
        if status is not None:
            return status
    if type(response) is dict:
        return as_status(reply_status)
    if response is None:
        return None
    return as_status(attribute(response, "status_code")) or as_status(attribute(response, "status"))


def _codes(get: Getter, code: Any, reply_code: str | None) -> tuple[str, ...]:
    codes = [reply_code] if reply_code else []
    if isinstance(code, str):
        codes.append(code)
    body = get("body")
    if type(body) is dict:
        codes.extend(_body_codes(body))
    for name in ("error_code", "type"):
        value = get(name)
        if isinstance(value, str) and value:
            codes.append(value)
    return tuple(codes)


def _body_codes(body: dict[str, Any]) -> list[str]:
    codes = []
    error = body.get("error")
    if type(error) is dict:
        body = error  # OpenAI and Anthropic nest them
    elif isinstance(error, str) and 0 < len(error) <= 128:
        codes.append(error)
    for key in ("code", "type", "reason", "status"):
        value = body.get(key)
        if isinstance(value, str) and 0 < len(value) <= 128 and value != "error":
            codes.append(value)
    return codes


def _grpc_status(get: Getter, code: Any, kind: ExceptionClass) -> str | None:
    name = None
    if kind.grpc and callable(code):
        name = grpc_name(code())  # a plain getter on grpc's errors
    elif code is not None and not isinstance(code, str | int) and not callable(code):
        name = grpc_name(code)
    return name or grpc_name(get("grpc_status_code"))


def _botocore_reply(response: dict[str, Any]) -> tuple[str | None, Any, Any]:
    error = response.get("Error")
    code = error.get("Code") if type(error) is dict else None
    metadata = response.get("ResponseMetadata")
    if type(metadata) is not dict:
        metadata = {}
    code = code if isinstance(code, str) and code else None
    return code, metadata.get("HTTPStatusCode"), metadata.get("HTTPHeaders")


def _body(get: Getter, response: Any) -> Any:
    body = get("body")
    if isinstance(body, dict | list | str | bytes | bytearray):
        return body
    details = get("details")  # google-api-core's parsed google.rpc details
    if type(details) is list and details:
        return {"details": details}
    if response is None or type(response) is dict:
        return None
    name = response_body_attribute(type(response))
    value = attribute(response, name) if name else None
    return value if isinstance(value, bytes | bytearray | str) else None


@lru_cache(maxsize=CLASS_CACHE_SIZE)
def response_body_attribute(cls: type) -> str | None:
    """Return where a response class keeps its in-memory body, if RESPONSE_BODIES knows it."""
    full, short = _lookup_names(*_module_and_qualname(cls))
    return RESPONSE_BODIES.get(full) or RESPONSE_BODIES.get(short)


def _headers(get: Getter, response: Any, reply_headers: Any) -> Any:
    headers = get("headers")
    if headers is not None:
        return headers
    if type(response) is dict:
        return reply_headers
    return None if response is None else attribute(response, "headers")


def as_status(value: Any) -> int | None:
    """Return `value` as an HTTP status if it is an int (or 3-digit text) in 100..599, else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        value = int(value)  # IntEnum, http.HTTPStatus
    elif isinstance(value, str) and len(value) == 3 and value.isascii() and value.isdigit():
        value = int(value)
    else:
        return None
    return value if 100 <= value <= 599 else None


def grpc_name(value: Any) -> str | None:
    """Return the gRPC status name of a StatusCode-like object (or of its name), else None."""
    if value is None:
        return None
    name = value if isinstance(value, str) else attribute(value, "name")
    return name if isinstance(name, str) and name in rules.GRPC_STATUS else None


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _delay(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return min(float(value), MAX_RETRY_AFTER)
    return None
