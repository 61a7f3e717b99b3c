"""What the exception itself says: its class (by "module.QualName" anywhere in its MRO), its
class name and its message, with the lookups that read the name and message tables."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Final

from classifier.taxonomy import FailureCategory as C

# Exception classes by "module.QualName", matched anywhere in the MRO (most derived class first), so
# that no third-party module is ever imported. A class also matches under "package.QualName" (the
# top-level package only), which covers private modules such as aiohttp.client_exceptions.
# Sources: each library's exception hierarchy as installed (see tests/classifier for real
# instances). Entries for a subclass precede its base where the subclass means something else
# (urllib3's NewConnectionError inherits from ConnectTimeoutError but is a refused connection).
#
# ValueError and TypeError are deliberately absent: inside an agent's own code they mean a bug,
# not "the request was wrong", and calling them INVALID_INPUT would stop the retry *and* mislead
# the human who reads the review queue. Validation libraries are listed by name instead.
EXCEPTION_TYPES: Final = MappingProxyType(
    {
        # builtins and standard library (socket.timeout, asyncio.TimeoutError and
        # concurrent.futures.TimeoutError are builtins.TimeoutError since 3.10/3.11; the older
        # names stay for described errors from other interpreters)
        "builtins.TimeoutError": C.TIMEOUT,
        "socket.timeout": C.TIMEOUT,
        "asyncio.exceptions.TimeoutError": C.TIMEOUT,
        "concurrent.futures._base.TimeoutError": C.TIMEOUT,
        "builtins.ConnectionError": C.TRANSIENT,
        "builtins.PermissionError": C.AUTH_FAILURE,
        "builtins.FileNotFoundError": C.RESOURCE_MISSING,
        "socket.gaierror": C.TRANSIENT,
        "socket.herror": C.TRANSIENT,
        "ssl.SSLEOFError": C.TRANSIENT,
        "ssl.SSLZeroReturnError": C.TRANSIENT,
        "http.client.IncompleteRead": C.TRANSIENT,
        "http.client.BadStatusLine": C.TRANSIENT,
        "http.client.RemoteDisconnected": C.TRANSIENT,
        # httpx / httpcore
        "httpx.TimeoutException": C.TIMEOUT,
        "httpx.NetworkError": C.TRANSIENT,
        "httpx.RemoteProtocolError": C.TRANSIENT,
        "httpx.ProxyError": C.TRANSIENT,
        "httpx.UnsupportedProtocol": C.INVALID_INPUT,
        "httpx.InvalidURL": C.INVALID_INPUT,
        "httpcore.TimeoutException": C.TIMEOUT,
        "httpcore.NetworkError": C.TRANSIENT,
        "httpcore.RemoteProtocolError": C.TRANSIENT,
        # requests
        "requests.exceptions.ConnectTimeout": C.TIMEOUT,
        "requests.exceptions.Timeout": C.TIMEOUT,
        "requests.exceptions.ConnectionError": C.TRANSIENT,
        "requests.exceptions.ChunkedEncodingError": C.TRANSIENT,
        "requests.exceptions.MissingSchema": C.INVALID_INPUT,
        "requests.exceptions.InvalidSchema": C.INVALID_INPUT,
        "requests.exceptions.InvalidURL": C.INVALID_INPUT,
        "requests.exceptions.InvalidHeader": C.INVALID_INPUT,
        # urllib3
        "urllib3.exceptions.NewConnectionError": C.TRANSIENT,
        "urllib3.exceptions.TimeoutError": C.TIMEOUT,
        "urllib3.exceptions.ProtocolError": C.TRANSIENT,
        "urllib3.exceptions.ProxyError": C.TRANSIENT,
        "urllib3.exceptions.LocationValueError": C.INVALID_INPUT,
        # aiohttp
        "aiohttp.client_exceptions.ServerTimeoutError": C.TIMEOUT,
        "aiohttp.client_exceptions.ClientConnectionError": C.TRANSIENT,
        "aiohttp.client_exceptions.ClientPayloadError": C.TRANSIENT,
        "aiohttp.http_exceptions.HttpProcessingError": C.TRANSIENT,  # a response cut short
        "aiohttp.client_exceptions.InvalidURL": C.INVALID_INPUT,
        # botocore
        "botocore.exceptions.ConnectTimeoutError": C.TIMEOUT,
        "botocore.exceptions.ReadTimeoutError": C.TIMEOUT,
        "botocore.exceptions.ConnectionError": C.TRANSIENT,
        "botocore.exceptions.ConnectionClosedError": C.TRANSIENT,
        "botocore.exceptions.NoCredentialsError": C.AUTH_FAILURE,
        "botocore.exceptions.PartialCredentialsError": C.AUTH_FAILURE,
        "botocore.exceptions.CredentialRetrievalError": C.AUTH_FAILURE,
        "botocore.exceptions.TokenRetrievalError": C.AUTH_FAILURE,
        "botocore.exceptions.UnauthorizedSSOTokenError": C.AUTH_FAILURE,
        "botocore.exceptions.ParamValidationError": C.INVALID_INPUT,
        # OpenAI and Anthropic SDKs (status errors are read by their status and body)
        "openai.APITimeoutError": C.TIMEOUT,
        "openai.APIConnectionError": C.TRANSIENT,
        "anthropic.APITimeoutError": C.TIMEOUT,
        "anthropic.APIConnectionError": C.TRANSIENT,
        # gRPC and Google
        "grpc.FutureTimeoutError": C.TIMEOUT,
        "google.api_core.exceptions.RetryError": C.TIMEOUT,
        "google.auth.exceptions.RefreshError": C.AUTH_FAILURE,
        "google.auth.exceptions.DefaultCredentialsError": C.AUTH_FAILURE,
        # redis-py (AuthenticationError inherits from its ConnectionError)
        "redis.exceptions.AuthenticationError": C.AUTH_FAILURE,
        "redis.exceptions.AuthorizationError": C.AUTH_FAILURE,
        "redis.exceptions.NoPermissionError": C.AUTH_FAILURE,
        "redis.exceptions.TimeoutError": C.TIMEOUT,
        "redis.exceptions.ConnectionError": C.TRANSIENT,
        "redis.exceptions.TryAgainError": C.TRANSIENT,
        "redis.exceptions.ClusterDownError": C.TRANSIENT,
        "redis.exceptions.DataError": C.INVALID_INPUT,
        # databases
        "psycopg.errors.ConnectionTimeout": C.TIMEOUT,
        "psycopg.errors.QueryCanceled": C.TIMEOUT,
        "psycopg.DataError": C.INVALID_INPUT,
        "psycopg.IntegrityError": C.INVALID_INPUT,
        "psycopg.ProgrammingError": C.INVALID_INPUT,
        "sqlalchemy.exc.TimeoutError": C.TIMEOUT,
        "pymysql.err.IntegrityError": C.INVALID_INPUT,
        "pymysql.err.DataError": C.INVALID_INPUT,
        "pymysql.err.ProgrammingError": C.INVALID_INPUT,
        "MySQLdb._exceptions.IntegrityError": C.INVALID_INPUT,
        "MySQLdb._exceptions.DataError": C.INVALID_INPUT,
        "MySQLdb._exceptions.ProgrammingError": C.INVALID_INPUT,
        # message brokers (AMQP reply codes are read by classifier.protocols first). pika raises
        # these two for a connection the broker closed with 403 and 530, keeping only the text.
        "pika.exceptions.ProbableAuthenticationError": C.AUTH_FAILURE,
        "pika.exceptions.ProbableAccessDeniedError": C.AUTH_FAILURE,
        "pika.exceptions.AMQPConnectionError": C.TRANSIENT,
        "pika.exceptions.StreamLostError": C.TRANSIENT,
        "amqp.exceptions.RecoverableConnectionError": C.TRANSIENT,
        "kombu.exceptions.OperationalError": C.TRANSIENT,
        # SSH (paramiko): a host key that does not match is the server failing to prove who it
        # is, as a TLS certificate that fails verification
        "paramiko.ssh_exception.AuthenticationException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.PasswordRequiredException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.BadHostKeyException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.IncompatiblePeer": C.INVALID_INPUT,
        "paramiko.ssh_exception.ProxyCommandFailure": C.TRANSIENT,
        # mail and file transfer (reply codes are read by classifier.protocols first)
        "smtplib.SMTPServerDisconnected": C.TRANSIENT,
        "smtplib.SMTPNotSupportedError": C.INVALID_INPUT,
        "ftplib.error_temp": C.TRANSIENT,
        # validation libraries
        "pydantic_core._pydantic_core.ValidationError": C.INVALID_INPUT,
        "pydantic.v1.error_wrappers.ValidationError": C.INVALID_INPUT,
        "pydantic.error_wrappers.ValidationError": C.INVALID_INPUT,
        "jsonschema.exceptions.ValidationError": C.INVALID_INPUT,
        "jsonschema.exceptions.SchemaError": C.INVALID_INPUT,
        "marshmallow.exceptions.ValidationError": C.INVALID_INPUT,
        # task runners: Celery re-exports billiard's time limits
        "billiard.exceptions.SoftTimeLimitExceeded": C.TIMEOUT,
        "billiard.exceptions.TimeLimitExceeded": C.TIMEOUT,
        "celery.exceptions.SoftTimeLimitExceeded": C.TIMEOUT,
        "celery.exceptions.TimeLimitExceeded": C.TIMEOUT,
        "celery.exceptions.TimeoutError": C.TIMEOUT,
        # Django, where agents run inside a Django process
        "django.core.exceptions.ValidationError": C.INVALID_INPUT,
        "django.core.exceptions.PermissionDenied": C.AUTH_FAILURE,
        "django.core.exceptions.ObjectDoesNotExist": C.RESOURCE_MISSING,
        "django.http.response.Http404": C.RESOURCE_MISSING,
        "django.db.utils.IntegrityError": C.INVALID_INPUT,
        "django.db.utils.DataError": C.INVALID_INPUT,
    }
)

# Classes whose `code` attribute is not an HTTP status or a provider code, so it is never read
# as one: SystemExit's exit status, aiohttp's HTTP *parser* errors (a local 400 for a response
# body cut short), aiohttp's ClientResponseError, whose `code` is a deprecated alias of `status`,
# and the protocol codes that classifier.protocols reads in their own tables (py-amqp's AMQP reply
# code, whose 530 is not an HTTP 530; paramiko's SSH channel-open failure reason).
CODE_IS_NOT_EVIDENCE: Final = frozenset(
    {
        "builtins.SystemExit",
        "aiohttp.http_exceptions.HttpProcessingError",
        "aiohttp.client_exceptions.ClientResponseError",
        "amqp.exceptions.AMQPError",
        "paramiko.ssh_exception.ChannelException",
    }
)

# Broad classes that say "something about the connection", consulted only after the message
# patterns of the same exception: psycopg raises OperationalError both for a refused connection
# (TRANSIENT) and for a rejected password (the message says so). Decision: without a better
# signal, a database OperationalError is TRANSIENT.
FALLBACK_TYPES: Final = MappingProxyType(
    {
        "psycopg.OperationalError": C.TRANSIENT,
        "psycopg2.OperationalError": C.TRANSIENT,
        "django.db.utils.OperationalError": C.TRANSIENT,
        "sqlalchemy.exc.OperationalError": C.TRANSIENT,
        "sqlite3.OperationalError": C.TRANSIENT,  # "database is locked"
        "pymysql.err.OperationalError": C.TRANSIENT,
        "MySQLdb._exceptions.OperationalError": C.TRANSIENT,
    }
)

# Substrings of a non-builtin class name (lowercased), first match wins, for libraries that no
# table above knows. Builtins are skipped: "ModuleNotFoundError" is a bug, not a missing resource.
# Order matters: "ConnectTimeout" is a timeout, "InvalidToken" an auth failure.
CLASS_NAME_PATTERNS: Final = (
    ("timeout", C.TIMEOUT),
    ("timedout", C.TIMEOUT),
    ("deadlineexceeded", C.TIMEOUT),
    ("timelimit", C.TIMEOUT),
    ("ratelimit", C.RATE_LIMITED),
    ("throttl", C.RATE_LIMITED),
    ("toomanyrequests", C.RATE_LIMITED),
    ("quotaexceeded", C.RATE_LIMITED),
    ("unauthorized", C.AUTH_FAILURE),
    ("unauthenticated", C.AUTH_FAILURE),
    ("authentication", C.AUTH_FAILURE),
    ("authorization", C.AUTH_FAILURE),
    ("forbidden", C.AUTH_FAILURE),
    ("permissiondenied", C.AUTH_FAILURE),
    ("accessdenied", C.AUTH_FAILURE),
    ("expiredtoken", C.AUTH_FAILURE),
    ("tokenexpired", C.AUTH_FAILURE),
    ("invalidtoken", C.AUTH_FAILURE),
    ("credential", C.AUTH_FAILURE),
    ("notfound", C.RESOURCE_MISSING),
    ("doesnotexist", C.RESOURCE_MISSING),
    ("nosuch", C.RESOURCE_MISSING),
    ("internalservererror", C.SERVER_FAULT),
    ("serviceunavailable", C.SERVER_FAULT),
    ("badgateway", C.SERVER_FAULT),
    ("overloaded", C.SERVER_FAULT),
    ("servererror", C.SERVER_FAULT),
    ("connectionerror", C.TRANSIENT),
    ("connecterror", C.TRANSIENT),
    ("connectionreset", C.TRANSIENT),
    ("connectionrefused", C.TRANSIENT),
    ("connectionclosed", C.TRANSIENT),
    ("disconnect", C.TRANSIENT),
    ("brokenpipe", C.TRANSIENT),
    ("validation", C.INVALID_INPUT),
    ("badrequest", C.INVALID_INPUT),
    ("invalidargument", C.INVALID_INPUT),
    ("invalidinput", C.INVALID_INPUT),
    ("invalidrequest", C.INVALID_INPUT),
    ("malformed", C.INVALID_INPUT),
    ("unprocessable", C.INVALID_INPUT),
)

# Substrings of the message (lowercased, first 500 characters), the least trusted signal. Phrases
# come from the standard library's and the client libraries' own messages (strerror texts,
# "Read timed out.", "Server disconnected", libpq's "password authentication failed"); single
# common words ("invalid", "error", "failed") are left out on purpose.
MESSAGE_PATTERNS: Final = (
    ("timed out", C.TIMEOUT),
    ("timeout", C.TIMEOUT),
    ("deadline exceeded", C.TIMEOUT),
    ("time limit exceeded", C.TIMEOUT),
    ("rate limit", C.RATE_LIMITED),
    ("ratelimit", C.RATE_LIMITED),
    ("too many requests", C.RATE_LIMITED),
    ("throttl", C.RATE_LIMITED),
    ("slow down", C.RATE_LIMITED),
    ("quota exceeded", C.RATE_LIMITED),
    ("password authentication failed", C.AUTH_FAILURE),
    ("authentication failed", C.AUTH_FAILURE),
    ("unauthorized", C.AUTH_FAILURE),
    ("unauthenticated", C.AUTH_FAILURE),
    ("forbidden", C.AUTH_FAILURE),
    ("access denied", C.AUTH_FAILURE),
    ("permission denied", C.AUTH_FAILURE),
    ("not authorized", C.AUTH_FAILURE),
    ("invalid api key", C.AUTH_FAILURE),
    ("incorrect api key", C.AUTH_FAILURE),
    ("token expired", C.AUTH_FAILURE),
    ("token has expired", C.AUTH_FAILURE),
    ("expired token", C.AUTH_FAILURE),
    ("invalid credentials", C.AUTH_FAILURE),
    ("certificate verify failed", C.AUTH_FAILURE),
    ("not found in known_hosts", C.AUTH_FAILURE),  # paramiko: the server's key is unknown
    ("certificate required", C.AUTH_FAILURE),
    ("does not match host name", C.AUTH_FAILURE),  # libpq's check of the server certificate
    ("connection refused", C.TRANSIENT),
    ("connection reset", C.TRANSIENT),
    ("connection aborted", C.TRANSIENT),
    ("connection closed", C.TRANSIENT),
    ("broken pipe", C.TRANSIENT),
    ("server disconnected", C.TRANSIENT),
    ("remote end closed", C.TRANSIENT),
    ("temporary failure in name resolution", C.TRANSIENT),
    ("network is unreachable", C.TRANSIENT),
    ("eof occurred", C.TRANSIENT),
    ("error reading ssh protocol banner", C.TRANSIENT),
    ("internal server error", C.SERVER_FAULT),
    ("service unavailable", C.SERVER_FAULT),
    ("bad gateway", C.SERVER_FAULT),
    ("overloaded", C.SERVER_FAULT),
    ("not found", C.RESOURCE_MISSING),
    ("no such", C.RESOURCE_MISSING),
    ("does not exist", C.RESOURCE_MISSING),
    ("validation error", C.INVALID_INPUT),
    ("invalid argument", C.INVALID_INPUT),
    ("malformed", C.INVALID_INPUT),
    ("bad request", C.INVALID_INPUT),
)


# The patterns as one alternation in table order; `message_category` says how a scan reads it.
_ANY_MESSAGE_PATTERN: Final = re.compile("|".join(re.escape(p) for p, _ in MESSAGE_PATTERNS))
_MESSAGE_PATTERN_INDEX: Final = {
    pattern: index for index, (pattern, _) in enumerate(MESSAGE_PATTERNS)
}


def class_name_category(name: str) -> C | None:
    """Return the category a class name suggests, or None if no pattern matches."""
    lowered = name.lower()
    for pattern, category in CLASS_NAME_PATTERNS:
        if pattern in lowered:
            return category
    return None


def message_category(message: str) -> C | None:
    """Return the category a message suggests, or None if no pattern matches.

    The patterns are searched as one regular expression over the lowercased first 500
    characters: every non-overlapping occurrence, leftmost first, and when several occur the one
    listed first in MESSAGE_PATTERNS wins ("rate limitimeout" is RATE_LIMITED: the "t" that
    "timeout" would need belongs to "rate limit").
    """
    found = _ANY_MESSAGE_PATTERN.findall(message[:500].lower())
    if not found:
        return None
    return MESSAGE_PATTERNS[min(_MESSAGE_PATTERN_INDEX[text] for text in found)][1]
