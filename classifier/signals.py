"""Reading the signals of an exception and of the exceptions it carries, into evidence nodes.
Here: what the rules tables say about an exception class (`exception_class`, a pure function of
the class, cached), reading one exception into a `Node` (its HTTP or gRPC status, provider codes,
SQLSTATE, the code of a protocol family, headers, retryable flag, delay and message), and
walking its chain (`read_chain`: `__cause__`, `__context__`, the link attributes libraries use,
exceptions kept in containers: exception-group members, a dict or list of per-address errors, a
retry library's finished last attempt; breadth first, each exception once, at most MAX_CHAIN
exceptions and MAX_DEPTH links deep). Reading is pure: attributes and in-memory headers only (a
response body is never read, a gRPC error's `code()` is a getter, a finished future's exception
is read with a zero timeout), and an attribute that raises when read counts as absent. Not here:
what the evidence means (`classifier.judge`) and the Failure built from it (`classifier.failure`).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any, Final, TypeVar

from classifier import protocols, rules
from classifier.protocols import CodeSource, Read
from classifier.retry_after import MAX_RETRY_AFTER
from classifier.taxonomy import FailureCategory

# The walk stops after this many exceptions or this many links deep, whichever comes first.
MAX_CHAIN: Final = 32
MAX_DEPTH: Final = 16
# Messages are cut to this many characters (they end up in `chain` and `detail`).
MESSAGE_LIMIT: Final = 300
# Attributes besides __cause__/__context__ that libraries use to carry the underlying exception:
# urllib's URLError.reason and urllib3's MaxRetryError.reason, SQLAlchemy's DBAPIError.orig,
# google-api-core's RetryError.cause, aiohttp's os_error and certificate_error; and containers of
# them: paramiko's NoValidConnectionsError.errors (a dict of address -> error, one per address
# tried), google-api-core's errors list, tenacity's RetryError.last_attempt (a finished future).
LINK_ATTRIBUTES: Final = (
    "reason",
    "orig",
    "cause",
    "os_error",
    "certificate_error",
    "errors",
    "last_attempt",
)
# Every attribute the evidence of an exception is read from, links included.
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
        *LINK_ATTRIBUTES,
    }
)
# Classes remembered by `exception_class`. Bounded because botocore creates exception classes
# per client, and a long-lived agent creates many clients.
CLASS_CACHE_SIZE: Final = 2048
UNPRINTABLE: Final = "<unprintable message>"

# Reads one attribute of the exception at hand: None if it is absent or raises when read.
Getter = Callable[[str], Any]
V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class ExceptionClass:
    """What the rules tables say about one exception class (or a class known only by name)."""

    name: str  # "module.QualName", as `chain` and `exception_type` show it
    qualname: str  # the class's own name, as `detail` shows it
    names: tuple[str, ...]  # the names an override may match, for every class of the MRO
    category: FailureCategory | None  # from the first known class of the MRO
    name_category: FailureCategory | None  # what the first telling non-builtin name suggests
    fallback: FailureCategory | None  # a broad class, which speaks only after the message
    grpc: bool  # a grpc.RpcError, whose `code()` returns the gRPC status
    code_is_evidence: bool  # False where `code` is an exit status or an alias
    # The READ_ATTRIBUTES the class itself defines (properties, slots, class attributes): with
    # those in an instance's __dict__, the only ones an instance can have, unless the class
    # answers any name (a custom __getattr__ or __getattribute__).
    attributes: frozenset[str] = frozenset()
    answers_any_name: bool = False
    code_source: CodeSource | None = None  # where the class keeps a protocol family's code
    # The READ_ATTRIBUTES worth reading on an instance: all but `code` where it is no evidence
    # (aiohttp's deprecated alias warns when read).
    readable: frozenset[str] = READ_ATTRIBUTES


@dataclass(slots=True)
class Node:
    """The evidence read from one exception of a chain (or from one described error)."""

    kind: ExceptionClass
    message: str
    status: int | None = None  # an HTTP status, 100..599
    codes: tuple[str, ...] = ()  # provider codes, in the order they were found
    grpc: str | None = None  # a gRPC status name ("UNAVAILABLE")
    sqlstate: str | None = None
    headers: Any = None  # the response's header map, scanned only when the Failure is built
    flag: bool | None = None  # the exception's own `retryable`
    delay: float | None = None  # the exception's own `retry_after`, in seconds


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


def exception_class_named(name: str) -> ExceptionClass:
    """Return what the rules say about a class known only by its name ("httpx.ReadTimeout").

    A builtin name (with or without "builtins.") resolves to the real class, so that its MRO
    counts (ConnectionResetError is a ConnectionError); any other name is read as written.
    """
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
    """Return a class's __module__ and __qualname__, "?" for either that is not a string."""
    module = getattr(klass, "__module__", None)
    qualname = getattr(klass, "__qualname__", None)
    return (
        module if isinstance(module, str) else "?",
        qualname if isinstance(qualname, str) else "?",
    )


def _defined_attributes(cls: type) -> frozenset[str]:
    """Return the READ_ATTRIBUTES that class `cls` defines (all of them if it cannot tell)."""
    try:
        return frozenset(name for name in READ_ATTRIBUTES if hasattr(cls, name))
    except Exception:
        return READ_ATTRIBUTES


def _answers_any_name(mro: tuple[type, ...]) -> bool:
    """Return whether a class of `mro` (below BaseException) may answer any attribute name."""
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
    """Return the ExceptionClass of an MRO given as (module, qualname), most derived first."""
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
    """Return "module.QualName" and "package.QualName" (the top-level package only), which
    covers private modules such as aiohttp.client_exceptions."""
    if not module:
        return qualname, qualname
    return f"{module}.{qualname}", f"{module.partition('.')[0]}.{qualname}"


def _first_entry(table: Mapping[str, V], looked_up: list[tuple[str, str]]) -> V | None:
    """Return the entry of the most derived class in the MRO that `table` names either way."""
    for full, short in looked_up:
        category = table.get(full) or table.get(short)
        if category is not None:
            return category
    return None


def _name_category(classes: list[tuple[str, str]]) -> FailureCategory | None:
    """Return what the first telling class name of the MRO suggests.

    Builtins are skipped: a ModuleNotFoundError is a bug, not a missing resource.
    """
    for module, qualname in classes:
        if module != "builtins":
            category = rules.class_name_category(qualname.rpartition(".")[2])
            if category is not None:
                return category
    return None


def read_chain(root: Any) -> list[Node]:
    """Return the nodes of `root` and of the exceptions linked to it, breadth first, each once.

    Cycles are cut by identity; the walk stops at MAX_CHAIN exceptions or MAX_DEPTH links deep,
    and it is a loop, not a recursion, so that no chain can exhaust the stack.
    """
    node, links = read_exception(root)
    nodes = [node]
    seen = {id(root)}
    level = [links]  # what the exceptions read last carry, one list per exception
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
    # Each attribute the exception can have is read once; the readers below look values up.
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
    """The getter of an exception with none of the READ_ATTRIBUTES."""
    return None


def _present_attributes(exc: Any, kind: ExceptionClass) -> frozenset[str]:
    """Return which of its class's readable attributes `exc` can have, without reading any."""
    if kind.answers_any_name:
        return kind.readable
    try:
        present = kind.readable.intersection(vars(exc))
    except Exception:  # no __dict__: only what the class defines (slots) exists
        present = frozenset()
    return present | kind.attributes


def _linked_exceptions(exc: Any, get: Getter, present: frozenset[str]) -> list[BaseException]:
    """Return the exceptions `exc` carries: cause, context, library links, group members."""
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
    """Return what a link attribute holds: an exception, the exception of a finished future, or
    the values of a list, tuple or dict of them (at most MAX_CHAIN)."""
    if isinstance(value, BaseException):
        return [value]
    if isinstance(value, Future):
        # A zero timeout: an unfinished future is skipped, never waited for.
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
    """Return the codes of the family `source` names, read where it says (as strings)."""
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
    """Return whether `value` can be a family's code: an int (not a bool) or a short string."""
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
    """Return the node of the exception `get` reads, from where client libraries put evidence."""
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
    )


def _status(get: Getter, code: Any, response: Any, reply_status: Any) -> int | None:
    """Return the HTTP status: the exception's own, its int `code`, else its response's."""
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
    """Return the provider codes: botocore's Error.Code, `code`, the JSON body's, then others."""
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
    """Return the codes of a JSON error body: {"error": {"code", "type"}} or top-level keys."""
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
    """Return the gRPC status name: grpc.RpcError's code(), a StatusCode, grpc_status_code."""
    name = None
    if kind.grpc and callable(code):
        name = grpc_name(code())  # a plain getter on grpc's errors
    elif code is not None and not isinstance(code, str | int) and not callable(code):
        name = grpc_name(code)
    return name or grpc_name(get("grpc_status_code"))


def _botocore_reply(response: dict[str, Any]) -> tuple[str | None, Any, Any]:
    """Return (Error.Code, HTTPStatusCode, HTTPHeaders) of botocore's parsed reply."""
    error = response.get("Error")
    code = error.get("Code") if type(error) is dict else None
    metadata = response.get("ResponseMetadata")
    if type(metadata) is not dict:
        metadata = {}
    code = code if isinstance(code, str) and code else None
    return code, metadata.get("HTTPStatusCode"), metadata.get("HTTPHeaders")


def _headers(get: Getter, response: Any, reply_headers: Any) -> Any:
    """Return the exception's header map, else its response's."""
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
    """Return `value` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


def _flag(value: Any) -> bool | None:
    """Return the exception's own retryable flag, if it is a bool."""
    return value if isinstance(value, bool) else None


def _delay(value: Any) -> float | None:
    """Return the exception's own delay in seconds, capped, if it is a non-negative number."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return min(float(value), MAX_RETRY_AFTER)
    return None
