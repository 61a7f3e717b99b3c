"""What the exception itself says: its class (by "module.QualName" anywhere in its MRO), its
class name and its message, with the lookups that read the name and message tables."""

from __future__ import annotations

import re
from types import MappingProxyType
from typing import Final

from classifier.taxonomy import FailureCategory as C

# Exception classes by "module.QualName" (or "package.QualName"), matched anywhere in the MRO so
# that no third-party module is imported. Sources: each library's exception hierarchy as installed.
# ValueError and TypeError are absent: in an agent's own code they mean a bug, not a bad request.
EXCEPTION_TYPES: Final = MappingProxyType(
    {
        # builtins and standard library (older names stay for other interpreters' errors)
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
        "httpx.TimeoutException": C.TIMEOUT,
        "httpx.NetworkError": C.TRANSIENT,
        "httpx.RemoteProtocolError": C.TRANSIENT,
        "httpx.ProxyError": C.TRANSIENT,
        "httpx.UnsupportedProtocol": C.INVALID_INPUT,
        "httpx.InvalidURL": C.INVALID_INPUT,
        "httpcore.TimeoutException": C.TIMEOUT,
        "httpcore.NetworkError": C.TRANSIENT,
        "httpcore.RemoteProtocolError": C.TRANSIENT,
        "requests.exceptions.ConnectTimeout": C.TIMEOUT,
        "requests.exceptions.Timeout": C.TIMEOUT,
        "requests.exceptions.ConnectionError": C.TRANSIENT,
        "requests.exceptions.ChunkedEncodingError": C.TRANSIENT,
        "requests.exceptions.MissingSchema": C.INVALID_INPUT,
        "requests.exceptions.InvalidSchema": C.INVALID_INPUT,
        "requests.exceptions.InvalidURL": C.INVALID_INPUT,
        "requests.exceptions.InvalidHeader": C.INVALID_INPUT,
        "urllib3.exceptions.NewConnectionError": C.TRANSIENT,
        "urllib3.exceptions.TimeoutError": C.TIMEOUT,
        "urllib3.exceptions.ProtocolError": C.TRANSIENT,
        "urllib3.exceptions.ProxyError": C.TRANSIENT,
        "urllib3.exceptions.LocationValueError": C.INVALID_INPUT,
        "aiohttp.client_exceptions.ServerTimeoutError": C.TIMEOUT,
        "aiohttp.client_exceptions.ClientConnectionError": C.TRANSIENT,
        "aiohttp.client_exceptions.ClientPayloadError": C.TRANSIENT,
        "aiohttp.http_exceptions.HttpProcessingError": C.TRANSIENT,  # a response cut short
        "aiohttp.client_exceptions.InvalidURL": C.INVALID_INPUT,
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
        # websockets: InvalidStatus carries the handshake's response (its status decides); a
        # handshake refused otherwise (200 from a plain HTTP endpoint, no Upgrade) fails alike
        # on every retry, while a handshake answer cut short is a blip.
        "websockets.exceptions.InvalidMessage": C.TRANSIENT,
        "websockets.exceptions.InvalidProxyMessage": C.TRANSIENT,
        "websockets.exceptions.InvalidURI": C.INVALID_INPUT,
        "websockets.exceptions.InvalidHandshake": C.INVALID_INPUT,
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
        # message brokers (AMQP reply codes are read by classifier.protocols first)
        "pika.exceptions.ProbableAuthenticationError": C.AUTH_FAILURE,
        "pika.exceptions.ProbableAccessDeniedError": C.AUTH_FAILURE,
        "pika.exceptions.AMQPConnectionError": C.TRANSIENT,
        "pika.exceptions.StreamLostError": C.TRANSIENT,
        "amqp.exceptions.RecoverableConnectionError": C.TRANSIENT,
        "kombu.exceptions.OperationalError": C.TRANSIENT,
        "paramiko.ssh_exception.AuthenticationException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.PasswordRequiredException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.BadHostKeyException": C.AUTH_FAILURE,
        "paramiko.ssh_exception.IncompatiblePeer": C.INVALID_INPUT,
        "paramiko.ssh_exception.ProxyCommandFailure": C.TRANSIENT,
        # mail and file transfer (reply codes are read by classifier.protocols first)
        "smtplib.SMTPServerDisconnected": C.TRANSIENT,
        "smtplib.SMTPNotSupportedError": C.INVALID_INPUT,
        "ftplib.error_temp": C.TRANSIENT,
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
        "django.core.exceptions.ValidationError": C.INVALID_INPUT,
        "django.core.exceptions.PermissionDenied": C.AUTH_FAILURE,
        "django.core.exceptions.ObjectDoesNotExist": C.RESOURCE_MISSING,
        "django.http.response.Http404": C.RESOURCE_MISSING,
        "django.db.utils.IntegrityError": C.INVALID_INPUT,
        "django.db.utils.DataError": C.INVALID_INPUT,
    }
)

# Classes whose `code` attribute is not an HTTP status or a provider code.
CODE_IS_NOT_EVIDENCE: Final = frozenset(
    {
        "builtins.SystemExit",
        "aiohttp.http_exceptions.HttpProcessingError",
        "aiohttp.client_exceptions.ClientResponseError",
        "amqp.exceptions.AMQPError",
        "paramiko.ssh_exception.ChannelException",
    }
)

# Broad classes consulted only after the same exception's message: psycopg raises OperationalError
# for a refused connection and for a rejected password alike.
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

# Substrings of a non-builtin class name (lowercased), first match wins.
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

# Substrings of the message, the least trusted signal. Phrases come from the standard library's
# and the client libraries' own messages; single common words are left out on purpose.
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
    # OpenSSL's alert texts as libpq and other C clients quote them ("SSL error: ssl/tls alert
    # handshake failure"), the same alerts as protocols.TLS_REASONS
    ("alert handshake failure", C.AUTH_FAILURE),
    ("alert bad certificate", C.AUTH_FAILURE),
    ("alert unknown ca", C.AUTH_FAILURE),
    ("alert certificate expired", C.AUTH_FAILURE),
    ("alert certificate revoked", C.AUTH_FAILURE),
    ("alert certificate unknown", C.AUTH_FAILURE),
    ("alert access denied", C.AUTH_FAILURE),
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

    Of several patterns found, the one listed first in MESSAGE_PATTERNS wins.
    """
    found = _ANY_MESSAGE_PATTERN.findall(message[:500].lower())
    if not found:
        return None
    return MESSAGE_PATTERNS[min(_MESSAGE_PATTERN_INDEX[text] for text in found)][1]
