"""Read an exception and its chain, and decide its failure category from the rules tables.

Evidence, strongest first: a status (HTTP or gRPC), a provider code, the class (its MRO, then
its name), the message. Within one exception a *specific* provider code refines the status it
came with (AWS sends throttling as a 400), and an exception that carries a status keeps the
status's strength in the chain comparison even then. Across the chain the strongest evidence
wins; between equals, the outer exception wins, except that a generic TRANSIENT verdict yields
to an equally strong, more specific one inside (requests' ConnectionError wrapping urllib3's
ReadTimeoutError is a timeout). Registered overrides are consulted over the whole chain first.

Reading is pure: attributes and in-memory headers only (a response body is never read, a gRPC
error's `code()` is a getter), no traceback formatting, and every failure to read an attribute
counts as "absent". The chain walk is iterative, cut by identity, MAX_CHAIN and MAX_DEPTH.
The only module state is two bounded caches of what the tables say about a class (a pure
function of the class), and the default Classifier, which has no overrides.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from typing import Any, Final

from classifier import rules
from classifier.failure import Failure, Signal
from classifier.overrides import OverrideRule, Overrides
from classifier.retry_after import (
    MAX_RETRY_AFTER,
    delay_from_values,
    header_values,
    no_known_headers,
)
from classifier.taxonomy import FailureCategory

# Chain walking stops after this many exceptions or this many links deep, whichever comes first.
MAX_CHAIN: Final = 32
MAX_DEPTH: Final = 16
# Messages are cut to this many characters in `chain` and `detail`.
MESSAGE_LIMIT: Final = 300
# Attributes besides __cause__/__context__ that libraries use to carry the underlying exception:
# urllib's URLError.reason and urllib3's MaxRetryError.reason, SQLAlchemy's DBAPIError.orig,
# google-api-core's RetryError.cause.
LINK_ATTRIBUTES: Final = frozenset({"reason", "orig", "cause"})

# Every attribute `read_node` and `links` look at.
PROBED_ATTRIBUTES: Final = frozenset(
    {
        "status_code",
        "status",
        "http_status",
        "code",
        "grpc_status_code",
        "headers",
        "response",
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

# Strength of each kind of evidence in the chain comparison.
_RANK_STATUS: Final = 8
_RANK_PROVIDER: Final = 6
_RANK_TYPE: Final = 4
_RANK_CLASS_NAME: Final = 3
_RANK_MESSAGE: Final = 2
_RANK_FALLBACK_TYPE: Final = 1

_UNCLASSIFIED = FailureCategory.UNCLASSIFIED
_TRANSIENT = FailureCategory.TRANSIENT


class TypeInfo:
    """What the rules tables say about one exception class; computed once per class."""

    __slots__ = (
        "category",
        "ceiling",
        "class_probes",
        "dynamic",
        "fallback",
        "group",
        "grpc",
        "lone",
        "lone_category",
        "lone_retryable",
        "name",
        "name_category",
        "names",
        "prefix",
        "read_code",
        "short_name",
        "short_prefix",
    )

    def __init__(
        self,
        name: str,
        short_name: str,
        names: tuple[str, ...],
        category: FailureCategory | None,
        name_category: FailureCategory | None,
        fallback: FailureCategory | None,
        grpc: bool,
        class_probes: frozenset[str] = frozenset(),
        dynamic: bool = False,
        read_code: bool = True,
    ) -> None:
        self.name = name
        self.short_name = short_name
        self.names = names
        self.category = category
        self.name_category = name_category
        self.fallback = fallback
        self.grpc = grpc
        # The attributes we read that the class itself defines (properties, slots, class
        # attributes); any other can only be in an instance's __dict__, unless the class is
        # `dynamic` (a custom __getattr__ or __getattribute__), where anything may exist.
        self.class_probes = class_probes
        self.dynamic = dynamic
        self.read_code = read_code  # False where `code` is no evidence (rules.CODE_IS_NOT_EVIDENCE)
        # Constants of the Failure of a lone instance (see `classify_lone`): the "Name: " prefixes
        # of its chain and detail, and its category when the class alone decides it (else None:
        # the message decides).
        self.prefix = f"{name}: "
        self.short_prefix = f"{short_name}: "
        self.lone_category = category if category is not None else name_category
        self.lone_retryable = (
            None if self.lone_category is None else rules.DEFAULT_RETRYABLE[self.lone_category]
        )
        # The strongest verdict a node of this class can get when it carries nothing but its
        # type and message (no status, code or SQLSTATE): `decide` skips judging such a node
        # when that cannot beat the verdict it holds (a message scan is the costly part).
        if category is not None:
            self.ceiling = _RANK_TYPE
        elif name_category is not None:
            self.ceiling = _RANK_CLASS_NAME
        else:
            self.ceiling = _RANK_MESSAGE  # the message, else the fallback type (weaker)
        # Set by `_build_type_info` for real classes: whether an instance may be read as a lone
        # exception (no attribute we read can exist on the class), and whether it is a group.
        self.lone = False
        self.group = False


# A pure cache, not state: the same class always gives the same TypeInfo. Bounded by clearing,
# because botocore creates exception classes per client and a long-lived agent makes many clients.
_TYPE_CACHE: dict[type, TypeInfo] = {}
_NAME_CACHE: dict[str, TypeInfo] = {}
TYPE_CACHE_LIMIT: Final = 2048
_TYPE_CACHE_GET = _TYPE_CACHE.get  # the cache is cleared in place, never replaced


def type_info(cls: type) -> TypeInfo:
    """Return the rules' view of exception class `cls` (cached)."""
    try:
        info = _TYPE_CACHE.get(cls)
    except Exception:  # a metaclass with a broken __hash__
        return _build_type_info(cls)
    if info is None:
        info = _build_type_info(cls)
        if len(_TYPE_CACHE) >= TYPE_CACHE_LIMIT:
            _TYPE_CACHE.clear()
        _TYPE_CACHE[cls] = info
    return info


def type_info_for_name(name: str) -> TypeInfo:
    """Return the rules' view of a class known only by its name ("httpx.ReadTimeout").

    A builtin name (with or without "builtins.") resolves to the real class, so that its MRO
    counts (ConnectionResetError is a ConnectionError); other names are read as written.
    """
    info = _NAME_CACHE.get(name)
    if info is None:
        info = _build_name_info(name)
        if len(_NAME_CACHE) >= TYPE_CACHE_LIMIT:
            _NAME_CACHE.clear()
        _NAME_CACHE[name] = info
    return info


def _class_names(klass: Any) -> tuple[str, str, str, str]:
    """Return (module, qualname, "module.QualName", "package.QualName") of a class."""
    module = getattr(klass, "__module__", None)
    qualname = getattr(klass, "__qualname__", None)
    module = module if isinstance(module, str) else "?"
    qualname = qualname if isinstance(qualname, str) else "?"
    return module, qualname, f"{module}.{qualname}", f"{module.partition('.')[0]}.{qualname}"


def _build_type_info(cls: type) -> TypeInfo:
    """Return the TypeInfo of `cls` by walking its MRO, most derived class first."""
    try:
        mro = tuple(cls.__mro__)
    except Exception:
        mro = (cls,)
    names: list[str] = []
    category = name_category = fallback = None
    grpc = False
    read_code = True
    for klass in mro:
        module, qualname, full, short = _class_names(klass)
        names.extend(n for n in (full, short, qualname) if n not in names)
        if category is None:
            category = rules.EXCEPTION_TYPES.get(full) or rules.EXCEPTION_TYPES.get(short)
        if fallback is None:
            fallback = rules.FALLBACK_TYPES.get(full) or rules.FALLBACK_TYPES.get(short)
        if name_category is None and module != "builtins":
            name_category = rules.class_name_category(qualname.rpartition(".")[2])
        grpc = grpc or short == "grpc.RpcError"
        read_code = read_code and full not in rules.CODE_IS_NOT_EVIDENCE
    _, qualname, full, _ = _class_names(cls)
    info = TypeInfo(
        full,
        qualname,
        tuple(names),
        category,
        name_category,
        fallback,
        grpc,
        _class_probes(cls),
        _is_dynamic(cls),
        read_code,
    )
    info.lone = not info.dynamic and not info.class_probes
    try:
        info.group = issubclass(cls, BaseExceptionGroup)
    except Exception:
        info.group, info.lone = True, False  # unsure: take the general path, which checks
    return info


def _class_probes(cls: type) -> frozenset[str]:
    """Return the PROBED_ATTRIBUTES that `cls` defines itself (all of them if unsure)."""
    try:
        return frozenset(name for name in PROBED_ATTRIBUTES if hasattr(cls, name))
    except Exception:
        return PROBED_ATTRIBUTES


def _is_dynamic(cls: type) -> bool:
    """Return True if `cls` may answer any attribute name (custom __getattr__/__getattribute__)."""
    try:
        for klass in cls.__mro__:
            if klass in (BaseException, object):
                continue
            if "__getattribute__" in vars(klass):
                return True
            if "__getattr__" in vars(klass):
                return _class_names(klass)[2] not in rules.FORWARDING_GETATTR
        return False
    except Exception:
        return True


def _build_name_info(name: str) -> TypeInfo:
    """Return the TypeInfo of a class named `name`, resolving builtins to their real class."""
    module, _, qualname = name.rpartition(".")
    if module in ("", "builtins"):
        candidate = getattr(builtins, qualname, None)
        if isinstance(candidate, type) and issubclass(candidate, BaseException):
            return type_info(candidate)
    short = f"{module.partition('.')[0]}.{qualname}" if module else qualname
    names = tuple(dict.fromkeys((name, short, qualname)))
    table, fallbacks = rules.EXCEPTION_TYPES, rules.FALLBACK_TYPES
    return TypeInfo(
        name=name,
        short_name=qualname,
        names=names,
        category=table.get(name) or table.get(short),
        name_category=rules.class_name_category(qualname.rpartition(".")[2]),
        fallback=fallbacks.get(name) or fallbacks.get(short),
        grpc=False,
    )


class Node:
    """The evidence read from one exception of a chain (or from one described error).

    Defaults live on the class, so that a node stores only what it found: most exceptions carry
    nothing but a type and a message, and classify runs on every failure of every agent.
    """

    status: int | None = None
    grpc: str | None = None
    codes: list[str] | tuple[()] = ()
    sqlstate: str | None = None
    headers: Any = None
    flag: bool | None = None
    delay: float | None = None
    linked = False  # whether library link attributes (reason, orig, cause) may be set
    link_names: tuple[str, ...] = ()  # those that may be set (empty: all of LINK_ATTRIBUTES)

    def __init__(self, info: TypeInfo, message: str) -> None:
        self.info = info
        self.message = message

    def override_codes(self) -> list[str]:
        """Return every code an override may match: provider codes, gRPC name, SQLSTATE."""
        return [*self.codes, *(code for code in (self.grpc, self.sqlstate) if code)]

    def first_code(self) -> str | None:
        """Return the code to report when no code decided: the first one read, if any."""
        if self.codes:
            return self.codes[0]
        return self.grpc or self.sqlstate


# A verdict on one node is a plain tuple (rank, category, signal, code, node, rule): it is built
# for every exception of every chain, and a tuple costs a fraction of a class instance.
Verdict = tuple[int, FailureCategory, Signal, str | None, Node | None, OverrideRule | None]

_STATUS = Signal.STATUS
_PROVIDER_CODE = Signal.PROVIDER_CODE
_TYPE = Signal.TYPE
_MESSAGE = Signal.MESSAGE
_NONE = Signal.NONE
_SIGNAL_OF_MATCH = {
    "provider_code": _PROVIDER_CODE,
    "exception_type": _TYPE,
    "status_code": _STATUS,
}
# Keyed by the category's value: enum members hash through a Python-level __hash__.
_DEFAULT_RETRYABLE = {category.value: value for category, value in rules.DEFAULT_RETRYABLE.items()}
_HTTP_STATUS = dict(rules.HTTP_STATUS)
_GRPC_STATUS = dict(rules.GRPC_STATUS)
_GENERIC_CODES = dict(rules.GENERIC_PROVIDER_CODES)
_NON_RETRYABLE_STATUS: Final = rules.NON_RETRYABLE_STATUS
_NON_RETRYABLE_CODES: Final = rules.NON_RETRYABLE_CODES
_provider_code_category: Final = rules.provider_code_category
_NO_VERDICT: Verdict = (0, _UNCLASSIFIED, _NONE, None, None, None)
_NO_OVERRIDES: Final = Overrides()  # never registered to: `decide` skips it
_new_failure: Final = Failure.make
_new_instance: Final = object.__new__
_UNPRINTABLE: Final = "<unprintable message>"


def as_status(value: Any) -> int | None:
    """Return `value` as an HTTP status if it is an int (or 3-digit text) in 100..599, else None."""
    if type(value) is not int:
        if value is None or isinstance(value, bool):
            return None
        if isinstance(value, int):
            value = int(value)  # IntEnum, http.HTTPStatus
        elif isinstance(value, str) and len(value) == 3 and value.isascii() and value.isdigit():
            value = int(value)
        else:
            return None
    return value if 100 <= value <= 599 else None


def grpc_name(value: Any, get: Callable[..., Any] = getattr) -> str | None:
    """Return the gRPC status name of a StatusCode-like object (or its name), else None."""
    name = value if isinstance(value, str) else get(value, "name", None)
    return name if isinstance(name, str) and name in _GRPC_STATUS else None


def _safe_getattr(obj: Any, name: str, default: Any = None) -> Any:
    """Return getattr(obj, name, default), or `default` if reading the attribute raises."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def message_of(exc: Any) -> str:
    """Return str(exc) cut to MESSAGE_LIMIT characters, or a placeholder if str() fails."""
    try:
        text = str(exc)
    except Exception:
        return "<unprintable message>"
    if type(text) is not str:
        return "<unprintable message>"
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def read_node(exc: Any) -> Node:
    """Return the evidence on `exc`; attributes that raise when read count as absent."""
    return _read_node(exc, type_info(type(exc)), message_of(exc))


def _read_node(exc: Any, info: TypeInfo, message: str) -> Node:
    """Return the evidence on `exc`, whose TypeInfo and message are already known."""
    node = Node(info, message)
    present = _present(exc, info)
    if not present:
        return node  # nothing we read exists: most exceptions carry just a type and a message
    if present == _RESPONSE_ONLY:  # a status error of httpx, requests, botocore ...
        try:
            _read_response_only(node, exc)
            return node
        except Exception:
            node = Node(info, message)  # read it again the general way, which copes
    if not LINK_ATTRIBUTES.isdisjoint(present):
        node.linked = True
        # Only these can exist: probing the others would only fail (through a __getattr__).
        node.link_names = tuple(name for name in LINK_ATTRIBUTES if name in present)
        if present <= LINK_ATTRIBUTES:
            return node  # links only (urllib's URLError.reason): nothing else to read
    try:
        _read_attributes(node, exc, getattr, present)
    except Exception:
        node = Node(info, message)
        node.linked = True
        node.link_names = tuple(name for name in LINK_ATTRIBUTES if name in present)
        try:
            _read_attributes(node, exc, _safe_getattr, present)
        except Exception:
            return node
    return node


def _present(exc: Any, info: TypeInfo) -> frozenset[str]:
    """Return which of the PROBED_ATTRIBUTES `exc` may have, without reading any of them."""
    if info.dynamic:
        return PROBED_ATTRIBUTES
    try:
        present = PROBED_ATTRIBUTES.intersection(exc.__dict__)
    except Exception:  # no __dict__: only class-level attributes (slots) exist
        present = frozenset()
    return present | info.class_probes if info.class_probes else present


_RESPONSE_ONLY: Final = frozenset({"response"})


def _read_response_only(node: Node, exc: Any) -> None:
    """Fill `node` as `_read_attributes` does when `response` is the only attribute present."""
    response = getattr(exc, "response", None)
    if type(response) is dict:
        codes: list[str] = []
        status, headers = _read_botocore_response(response, codes, None, None)
        if codes:
            node.codes = codes
    elif response is not None:
        status = as_status(getattr(response, "status_code", None))
        if status is None:
            status = as_status(getattr(response, "status", None))
        headers = getattr(response, "headers", None)
    else:
        status = headers = None
    node.status = status
    node.headers = headers


def _read_attributes(
    node: Node, exc: Any, get: Callable[..., Any], present: frozenset[str]
) -> None:
    """Fill `node` from the attributes where client libraries put statuses, codes and headers."""
    codes: list[str] = []
    status = None
    for name in ("status_code", "status", "http_status"):
        if name in present:
            status = as_status(get(exc, name, None))
            if status is not None:
                break
    code = get(exc, "code", None) if "code" in present and node.info.read_code else None
    if code is not None:
        if isinstance(code, str):
            codes.append(code)
        elif node.info.grpc and callable(code):
            node.grpc = grpc_name(code(), get)  # grpc.RpcError.code() is a plain getter
        elif isinstance(code, int):
            if status is None:
                status = as_status(code)  # urllib's HTTPError.code, google-api-core's code
        elif not callable(code):
            node.grpc = grpc_name(code, get)
    if "grpc_status_code" in present and node.grpc is None:
        node.grpc = grpc_name(get(exc, "grpc_status_code", None), get)
    headers = get(exc, "headers", None) if "headers" in present else None
    response = get(exc, "response", None) if "response" in present else None
    if type(response) is dict:
        status, headers = _read_botocore_response(response, codes, status, headers)
    elif response is not None:
        if status is None:
            status = as_status(get(response, "status_code", None))
            if status is None:
                status = as_status(get(response, "status", None))
        if headers is None:
            headers = get(response, "headers", None)
    body = get(exc, "body", None) if "body" in present else None
    if type(body) is dict:
        _read_body(body, codes)
    for name in ("error_code", "type", "sqlstate", "pgcode"):
        if name in present:
            value = get(exc, name, None)
            if isinstance(value, str) and value:
                if name in ("sqlstate", "pgcode"):
                    node.sqlstate = value
                else:
                    codes.append(value)
    if codes:
        node.codes = codes
    node.status = status
    node.headers = headers
    if "retryable" in present:
        flag = get(exc, "retryable", None)
        if isinstance(flag, bool):
            node.flag = flag
    if "retry_after" in present:
        delay = get(exc, "retry_after", None)
        if isinstance(delay, int | float) and not isinstance(delay, bool) and delay >= 0:
            node.delay = min(float(delay), MAX_RETRY_AFTER)


def _read_botocore_response(
    response: dict[str, Any], codes: list[str], status: int | None, headers: Any
) -> tuple[int | None, Any]:
    """Read botocore's ClientError.response: Error.Code, HTTPStatusCode, HTTPHeaders."""
    error = response.get("Error")
    if type(error) is dict and isinstance(error.get("Code"), str) and error["Code"]:
        codes.insert(0, error["Code"])
    metadata = response.get("ResponseMetadata")
    if type(metadata) is dict:
        if status is None:
            status = as_status(metadata.get("HTTPStatusCode"))
        if headers is None:
            headers = metadata.get("HTTPHeaders")
    return status, headers


def _read_body(body: dict[str, Any], codes: list[str]) -> None:
    """Read a JSON error body: {"error": {"code", "type"}} (OpenAI, Anthropic) or top-level keys."""
    error = body.get("error")
    if type(error) is dict:
        body = error
    elif isinstance(error, str) and 0 < len(error) <= 128:
        codes.append(error)
    for key in ("code", "type", "reason", "status"):
        value = body.get(key)
        if isinstance(value, str) and 0 < len(value) <= 128 and value != "error":
            codes.append(value)


def links(exc: Any, node: Node) -> list[BaseException]:
    """Return the exceptions `exc` carries: cause, context, library links, group members."""
    found: list[BaseException] = []
    try:
        candidates = [exc.__cause__, exc.__context__]
    except Exception:
        candidates = [_safe_getattr(exc, "__cause__"), _safe_getattr(exc, "__context__")]
    if node.linked:
        for name in node.link_names or LINK_ATTRIBUTES:
            candidates.append(_safe_getattr(exc, name))
    for candidate in candidates:
        if isinstance(candidate, BaseException):
            found.append(candidate)
    if isinstance(exc, BaseExceptionGroup):
        found.extend(e for e in exc.exceptions[:MAX_CHAIN] if isinstance(e, BaseException))
    return found


def read_chain(root: Any, root_node: Node | None = None) -> list[Node]:
    """Return the nodes of `root` and the exceptions linked to it, breadth first, each once.

    Cycles are cut by identity; the walk stops at MAX_CHAIN exceptions or MAX_DEPTH links deep.
    `root_node` is the node of `root` when it has been read already.
    """
    if root_node is None:
        root_node = read_node(root)
    if not root_node.linked:  # fast path: a lone exception with nothing linked to it
        try:
            if (
                root.__cause__ is None
                and root.__context__ is None
                and not isinstance(root, BaseExceptionGroup)
            ):
                return [root_node]
        except Exception:
            pass
    nodes = [root_node]
    seen = {id(root)}
    frontier = [(root, root_node)]
    for _ in range(MAX_DEPTH):
        next_frontier = []
        for exc, node in frontier:
            if node.linked or isinstance(exc, BaseExceptionGroup):
                candidates: Any = links(exc, node)
            else:
                try:  # links, inlined for the common case: a cause and a context only
                    candidates = (exc.__cause__, exc.__context__)
                except Exception:
                    candidates = links(exc, node)
            for linked in candidates:
                if not isinstance(linked, BaseException) or id(linked) in seen:
                    continue
                seen.add(id(linked))
                # read_node, inlined: most members of a chain are of a `lone` class and carry
                # none of the attributes we read, so their node is their type and message.
                cls = type(linked)
                try:
                    info = _TYPE_CACHE_GET(cls)
                except Exception:  # a metaclass with a broken __hash__: type_info copes
                    info = None
                if info is None:
                    info = type_info(cls)
                message = message_of(linked)
                try:
                    plain = info.lone and PROBED_ATTRIBUTES.isdisjoint(linked.__dict__)
                except Exception:
                    plain = False
                linked_node = Node(info, message) if plain else _read_node(linked, info, message)
                nodes.append(linked_node)
                next_frontier.append((linked, linked_node))
                if len(nodes) >= MAX_CHAIN:
                    return nodes
        if not next_frontier:
            break
        frontier = next_frontier
    return nodes


def judge(node: Node) -> Verdict:
    """Return the core rules' verdict on one node (strongest evidence of that node first)."""
    grpc_category = _GRPC_STATUS.get(node.grpc) if node.grpc else None
    status = node.status
    status_category = None
    if status is not None:
        status_category = _HTTP_STATUS.get(status) or rules.status_category(status)
    if node.codes or node.sqlstate:
        rank = _RANK_STATUS if grpc_category or status_category else _RANK_PROVIDER
        for code in node.codes:
            category = rules.provider_code_category(code)
            if category is not None:
                return (rank, category, _PROVIDER_CODE, code, node, None)
        if node.sqlstate:
            category = rules.sqlstate_category(node.sqlstate)
            if category is not None:
                return (rank, category, _PROVIDER_CODE, node.sqlstate, node, None)
    if grpc_category is not None:
        return (_RANK_STATUS, grpc_category, _STATUS, node.grpc, node, None)
    if status_category is not None:
        return (_RANK_STATUS, status_category, _STATUS, None, node, None)
    for code in node.codes:
        category = rules.GENERIC_PROVIDER_CODES.get(code)
        if category is not None:
            return (_RANK_PROVIDER, category, _PROVIDER_CODE, code, node, None)
    info = node.info
    if info.category is not None:
        return (_RANK_TYPE, info.category, _TYPE, None, node, None)
    if info.name_category is not None:
        return (_RANK_CLASS_NAME, info.name_category, _TYPE, None, node, None)
    category = rules.message_category(node.message)
    if category is not None:
        return (_RANK_MESSAGE, category, _MESSAGE, None, node, None)
    if info.fallback is not None:
        return (_RANK_FALLBACK_TYPE, info.fallback, _TYPE, None, node, None)
    return _NO_VERDICT


def _override_verdict(node: Node, overrides: Overrides, provider: str | None) -> Verdict | None:
    """Return the verdict of the registered override matching `node`, or None."""
    rule = overrides.find(
        provider, codes=node.override_codes(), type_names=node.info.names, status=node.status
    )
    if rule is None:
        return None
    signal = _SIGNAL_OF_MATCH[rule.match_on.value]
    code = rule.match_value if signal is _PROVIDER_CODE else None
    return (_RANK_STATUS, rule.failure_type, signal, code, node, rule)


def decide(nodes: list[Node], overrides: Overrides, provider: str | None) -> Verdict:
    """Return the deciding verdict over a chain: overrides first, then the strongest core rule.

    Between equally strong verdicts the outer one wins, except that a TRANSIENT verdict (the
    vaguest category a signal can give) yields to a more specific one.
    """
    if overrides.count:
        for node in nodes:
            verdict = _override_verdict(node, overrides, provider)
            if verdict is not None:
                return verdict
    if len(nodes) == 1:
        return judge(nodes[0])
    best = _NO_VERDICT
    best_rank = 0
    best_transient = False  # whether best[1] is TRANSIENT
    for node in nodes:
        if node.status is None and not node.codes and not node.grpc and not node.sqlstate:
            # Only the type and message can speak: skip the node if even its best cannot win,
            # else take judge's verdict from the class where the class decides.
            info = node.info
            ceiling = info.ceiling
            if ceiling < best_rank or (ceiling == best_rank and not best_transient):
                continue
            if ceiling == _RANK_TYPE:
                verdict: Verdict = (_RANK_TYPE, info.category, _TYPE, None, node, None)
            elif ceiling == _RANK_CLASS_NAME:
                verdict = (_RANK_CLASS_NAME, info.name_category, _TYPE, None, node, None)
            else:
                verdict = judge(node)
        else:
            verdict = judge(node)
        rank = verdict[0]
        if rank > best_rank or (
            rank == best_rank and best_transient and verdict[1] is not _TRANSIENT
        ):
            best, best_rank, best_transient = verdict, rank, verdict[1] is _TRANSIENT
            if rank == _RANK_STATUS and not best_transient:
                break
    return best


class Classifier:
    """Classify exceptions with the core rules, after the registered `overrides`.

    `provider` is the default provider scope for overrides; `classify(exc, provider=...)` replaces
    it for one call.
    """

    def __init__(self, overrides: Overrides | None = None, provider: str | None = None) -> None:
        self.overrides = overrides if overrides is not None else Overrides()
        self.provider = provider

    def __repr__(self) -> str:
        return f"Classifier(overrides={self.overrides!r}, provider={self.provider!r})"

    def classify(self, exc: BaseException, provider: str | None = None) -> Failure:
        """Return the Failure `exc` represents; never raises, does no I/O.

        Falls back to UNCLASSIFIED with signal "none" if anything about `exc` defeats reading it.
        """
        if not self.overrides.count:
            return _classify_core(exc)
        try:
            nodes = read_chain(exc)
            verdict = decide(nodes, self.overrides, provider or self.provider)
            return build_failure(nodes, verdict)
        except Exception:
            return fallback_failure(exc)

    def classify_nodes(self, nodes: list[Node], provider: str | None = None) -> Failure:
        """Return the Failure a chain of nodes (outermost first) represents."""
        return build_failure(nodes, decide(nodes, self.overrides, provider or self.provider))


def _classify_core(exc: Any) -> Failure:
    """Return the Failure of `exc` under the core rules alone (no overrides); never raises.

    One TypeInfo lookup and one str(exc) per exception: the lone case (see `classify_lone`) is
    answered from the TypeInfo's constants; any other is read into a node and handed on.
    """
    try:
        cls = type(exc)
        try:
            info = _TYPE_CACHE_GET(cls)
        except Exception:  # a metaclass with a broken __hash__: type_info copes
            info = None
        if info is None:
            info = type_info(cls)
        try:  # message_of, inlined
            message = str(exc)
        except Exception:
            message = _UNPRINTABLE
        else:
            if type(message) is not str:
                message = _UNPRINTABLE
            elif len(message) > MESSAGE_LIMIT:
                message = message[: MESSAGE_LIMIT - 1] + "…"
        if info.lone:
            # No attribute we read can exist on the class: the instance's __dict__ says which
            # do. Read once, with the links: a single exception is answered here.
            try:
                present = PROBED_ATTRIBUTES.intersection(exc.__dict__)
                alone = (
                    exc.__cause__ is None
                    and exc.__context__ is None
                    and not isinstance(exc, BaseExceptionGroup)
                )
            except Exception:
                present, alone = None, False  # the general path below copes
            if alone and not present:
                # _lone_failure, inlined: the commonest case (a builtin or a transport error).
                if info.lone_category is not None:
                    failure = _new_instance(Failure)
                    failure.__dict__.update(
                        {
                            "category": info.lone_category,
                            "retryable": info.lone_retryable,
                            "retry_after": None,
                            "status_code": None,
                            "provider_code": None,
                            "exception_type": info.name,
                            "signal": _TYPE,
                            "chain": (info.prefix + message,),
                            "detail": info.short_prefix + message if message else info.short_name,
                        }
                    )
                    return failure
                failure = _lone_failure(exc, info, message)
                if failure is not None:
                    return failure
            elif alone and present == _RESPONSE_ONLY:  # a status error on its own
                failure = _response_failure(exc, info, message)
                if failure is not None:
                    return failure
        node = _read_node(exc, info, message)
        if not node.linked:
            try:
                alone = (
                    exc.__cause__ is None
                    and exc.__context__ is None
                    and not isinstance(exc, BaseExceptionGroup)
                )
            except Exception:
                alone = False
            if alone:  # what read_chain and decide answer for a single node
                return _single_failure(node, judge(node))
        nodes = read_chain(exc, node)
        return build_failure(nodes, decide(nodes, _NO_OVERRIDES, None))
    except Exception:
        return fallback_failure(exc)


def _response_failure(exc: Any, info: TypeInfo, message: str) -> Failure | None:
    """Return the Failure of a lone exception whose only attribute we read is `response`.

    `_read_response_only`, `judge` and `_single_failure` written out for the commonest status
    error (httpx, requests, botocore's ClientError): a status, at most one provider code (AWS
    Error.Code), headers, and no flag, delay, gRPC status or SQLSTATE. Return None where the
    verdict would come from the class or the message, or where reading the response raised: the
    general path answers those.
    """
    try:
        response = exc.response  # in the instance's __dict__ (the class is `lone`)
        code = None
        if type(response) is dict:  # botocore's parsed response
            error = response.get("Error")
            if type(error) is dict:
                code = error.get("Code")
                if not isinstance(code, str) or not code:
                    code = None
            metadata = response.get("ResponseMetadata")
            if type(metadata) is dict:
                status = metadata.get("HTTPStatusCode")
                if type(status) is not int or not 100 <= status <= 599:
                    status = as_status(status)  # as_status, inlined for a plain int
                headers = metadata.get("HTTPHeaders")
            else:
                status = headers = None
        elif response is not None:
            try:  # getattr(response, "status_code", None), without the call
                status = response.status_code
            except AttributeError:
                status = None
            if type(status) is not int or not 100 <= status <= 599:
                status = as_status(status)
                if status is None:
                    status = as_status(getattr(response, "status", None))
            try:
                headers = response.headers
            except AttributeError:
                headers = None
        else:
            return None  # no evidence but the class and the message
        category = _provider_code_category(code) if code is not None else None
        if category is not None:
            signal, decided = _PROVIDER_CODE, code
        elif status is not None and (
            category := _HTTP_STATUS.get(status) or rules.status_category(status)
        ):
            signal, decided = _STATUS, None
        elif code is not None and (category := _GENERIC_CODES.get(code)) is not None:
            signal, decided = _PROVIDER_CODE, code
        else:
            return None
        none_known = headers is None or no_known_headers(headers)
        found = _EMPTY if none_known else header_values(headers)
    except Exception:
        return None
    retryable = _should_retry(found) if found else None
    if retryable is None:
        if signal is _STATUS and status in _NON_RETRYABLE_STATUS:
            retryable = False  # 501, 505: the server says it never will
        elif decided is not None and decided in _NON_RETRYABLE_CODES:
            retryable = False
        else:
            retryable = _DEFAULT_RETRYABLE[category._value_]
    delay = delay_from_values(found) if retryable and found else None
    return _one_exception_failure(info, message, category, retryable, delay, status, code, signal)


def classify_lone(exc: Any) -> Failure | None:
    """Return the Failure of an exception with no attribute we read and nothing linked to it.

    Return None for any other exception. This is the common case (a builtin or a library's
    transport error raised on its own), and its Failure depends only on the type and message,
    so it skips building a node and a verdict.
    """
    info = type_info(type(exc))
    if not info.lone:
        return None
    return _lone_failure(exc, info, message_of(exc))


def _lone_failure(exc: Any, info: TypeInfo, message: str) -> Failure | None:
    """Return `classify_lone`'s answer for `exc`, whose TypeInfo says `lone` (else None)."""
    try:
        if exc.__cause__ is not None or exc.__context__ is not None:
            return None
        if not PROBED_ATTRIBUTES.isdisjoint(exc.__dict__) or isinstance(exc, BaseExceptionGroup):
            return None
    except Exception:
        return None
    category = info.lone_category
    if category is not None:
        signal = _TYPE
        retryable = info.lone_retryable
    else:
        category = rules.message_category(message)
        if category is not None:
            signal = _MESSAGE
        elif info.fallback is not None:
            category, signal = info.fallback, _TYPE
        else:
            category, signal = _UNCLASSIFIED, _NONE
        retryable = _DEFAULT_RETRYABLE[category._value_]
    return _new_failure(
        category,
        retryable,
        None,
        None,
        None,
        info.name,
        signal,
        (info.prefix + message,),
        info.short_prefix + message if message else info.short_name,
    )


def build_failure(nodes: list[Node], verdict: Verdict) -> Failure:
    """Return the Failure of `verdict` over `nodes`: retryable, delay, codes, chain and detail."""
    _, category, signal, code, decider, rule = verdict
    outer = nodes[0]
    if decider is None:
        decider = outer
    found = header_values(decider.headers) if decider.headers is not None else _EMPTY
    retryable = _retryable(verdict, decider, found)
    status = decider.status
    if status is None and len(nodes) > 1:
        for node in nodes:
            if node.status is not None:
                status = node.status
                break
    if code is None and rule is None:
        code = decider.first_code()
    if len(nodes) == 1:
        chain: tuple[str, ...] = (outer.info.prefix + outer.message,)
    else:
        chain = tuple([n.info.prefix + n.message for n in nodes])
    return _new_failure(
        category,
        retryable,
        _delay(decider, nodes, found) if retryable else None,
        status,
        code[:128] if code else None,
        decider.info.name,
        signal,
        chain,
        _detail(outer, decider),
    )


_EMPTY: dict[str, Any] = {}


def _single_failure(node: Node, verdict: Verdict) -> Failure:
    """Return `build_failure([node], verdict)`, for a chain of one exception."""
    category, signal, code, rule = verdict[1], verdict[2], verdict[3], verdict[5]
    headers = node.headers
    found = header_values(headers) if headers is not None else _EMPTY
    retryable = _retryable(verdict, node, found)
    if retryable:
        delay = node.delay
        if delay is None and found:
            delay = delay_from_values(found)
    else:
        delay = None
    if code is None and rule is None:
        code = node.codes[0] if node.codes else node.grpc or node.sqlstate
    return _one_exception_failure(
        node.info, node.message, category, retryable, delay, node.status, code, signal
    )


def _one_exception_failure(
    info: TypeInfo,
    message: str,
    category: FailureCategory,
    retryable: bool,
    retry_after: float | None,
    status: int | None,
    code: str | None,
    signal: Signal,
) -> Failure:
    """The Failure of a chain of one exception, built without the dataclass's __init__."""
    failure = _new_instance(Failure)
    failure.__dict__.update(
        {
            "category": category,
            "retryable": retryable,
            "retry_after": retry_after,
            "status_code": status,
            "provider_code": code[:128] if code else None,
            "exception_type": info.name,
            "signal": signal,
            "chain": (info.prefix + message,),
            "detail": info.short_prefix + message if message else info.short_name,
        }
    )
    return failure


def _retryable(verdict: Verdict, decider: Node, found: dict[str, Any]) -> bool:
    """Return whether a retry can help: override, provider flag, specific code, category default."""
    _, category, signal, code, _, rule = verdict
    if rule is not None and rule.retryable is not None:
        return rule.retryable
    if decider.flag is not None:
        return decider.flag
    if found:
        flag = _should_retry(found)
        if flag is not None:
            return flag
    if signal is _STATUS and decider.status in _NON_RETRYABLE_STATUS:
        return False
    if code is not None and code in _NON_RETRYABLE_CODES:
        return False
    return _DEFAULT_RETRYABLE[category._value_]


def _should_retry(found: dict[str, Any]) -> bool | None:
    """Return the server's own x-should-retry flag among the known header values, if it says."""
    should_retry = found.get("x-should-retry")
    if isinstance(should_retry, bytes):
        should_retry = should_retry.decode("latin-1")
    if isinstance(should_retry, str) and should_retry.strip().lower() in ("true", "false"):
        return should_retry.strip().lower() == "true"
    return None


def _delay(decider: Node, nodes: list[Node], found: dict[str, Any]) -> float | None:
    """Return the delay asked for by the deciding exception, else by the first one that asks."""
    if decider.delay is not None:
        return decider.delay
    if found:
        delay = delay_from_values(found)
        if delay is not None:
            return delay
    for node in nodes:
        if node is decider:
            continue
        if node.delay is not None:
            return node.delay
        if node.headers is not None:
            delay = delay_from_values(header_values(node.headers))
            if delay is not None:
                return delay
    return None


def _detail(outer: Node, decider: Node) -> str:
    """Return "Name: message" of the outer exception, and of the decider when it is another one."""
    text = outer.info.short_prefix + outer.message if outer.message else outer.info.short_name
    if decider is not outer:
        inner = decider.info.short_name
        text += f" (caused by {inner}: {decider.message})" if decider.message else f" ({inner})"
    return text


def fallback_failure(exc: Any) -> Failure:
    """Return the UNCLASSIFIED Failure used when `exc` cannot be read at all; never raises."""
    try:
        name = _class_names(type(exc))[2]
    except Exception:
        name = "?"
    message = message_of(exc)
    return Failure(
        category=_UNCLASSIFIED,
        retryable=rules.DEFAULT_RETRYABLE[_UNCLASSIFIED],
        exception_type=name,
        signal=_NONE,
        chain=(f"{name}: {message}",),
        detail=f"{name.rpartition('.')[2]}: {message}",
    )


DEFAULT_CLASSIFIER: Final = Classifier()


def classify(exc: BaseException) -> Failure:
    """Return the Failure `exc` represents under the core rules (no overrides); never raises."""
    if DEFAULT_CLASSIFIER.overrides.count:  # someone registered rules on the default classifier
        return DEFAULT_CLASSIFIER.classify(exc)
    return _classify_core(exc)
