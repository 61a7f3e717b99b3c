"""What the codes an error carries say: HTTP statuses, gRPC statuses, provider codes (cloud
services' own included) and PostgreSQL SQLSTATEs, with the lookups that read them."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final

from classifier.taxonomy import FailureCategory as C

# HTTP status codes with a meaning of their own (RFC 9110 section 15, RFC 6585, RFC 8470, RFC 7725,
# the unofficial 598/599 proxy timeouts); `status_category` reads any other.
HTTP_STATUS: Final = MappingProxyType(
    {
        400: C.INVALID_INPUT,
        401: C.AUTH_FAILURE,
        402: C.AUTH_FAILURE,  # payment required: the account, not the request, must change
        403: C.AUTH_FAILURE,
        404: C.RESOURCE_MISSING,
        407: C.AUTH_FAILURE,  # proxy authentication required
        408: C.TIMEOUT,
        409: C.INVALID_INPUT,
        410: C.RESOURCE_MISSING,
        412: C.INVALID_INPUT,
        421: C.TRANSIENT,  # misdirected request: a new connection usually lands elsewhere
        422: C.INVALID_INPUT,
        423: C.TRANSIENT,  # locked: the lock is released eventually
        425: C.TRANSIENT,  # too early: replay after the handshake completes
        429: C.RATE_LIMITED,
        451: C.RESOURCE_MISSING,  # unavailable for legal reasons: switch source, record a gap
        500: C.SERVER_FAULT,
        501: C.SERVER_FAULT,
        502: C.SERVER_FAULT,
        503: C.SERVER_FAULT,
        504: C.SERVER_FAULT,  # a gateway timeout: the remote side broke, not our deadline
        511: C.AUTH_FAILURE,  # network authentication required (captive portal)
        598: C.TIMEOUT,
        599: C.TIMEOUT,
    }
)

# Statuses of a retryable category whose answer never changes (RFC 9110).
NON_RETRYABLE_STATUS: Final = frozenset({501, 505})

# gRPC status names (grpc/doc/statuscodes.md). UNAVAILABLE is "most likely a transient condition"
# there, and a client raises it for a refused connection too.
GRPC_STATUS: Final = MappingProxyType(
    {
        "CANCELLED": C.TRANSIENT,
        "UNKNOWN": C.SERVER_FAULT,  # what a server returns for an unhandled exception
        "INVALID_ARGUMENT": C.INVALID_INPUT,
        "DEADLINE_EXCEEDED": C.TIMEOUT,
        "NOT_FOUND": C.RESOURCE_MISSING,
        "ALREADY_EXISTS": C.INVALID_INPUT,
        "PERMISSION_DENIED": C.AUTH_FAILURE,
        "RESOURCE_EXHAUSTED": C.RATE_LIMITED,
        "FAILED_PRECONDITION": C.INVALID_INPUT,
        "ABORTED": C.TRANSIENT,  # a concurrency conflict: retry the whole transaction
        "OUT_OF_RANGE": C.INVALID_INPUT,
        "UNIMPLEMENTED": C.SERVER_FAULT,
        "INTERNAL": C.SERVER_FAULT,
        "UNAVAILABLE": C.TRANSIENT,
        "DATA_LOSS": C.SERVER_FAULT,
        "UNAUTHENTICATED": C.AUTH_FAILURE,
    }
)

# Provider codes specific enough to refine the HTTP status they arrive with. Sources: botocore's
# standard retry mode, the AWS error references, OpenAI's error-code guide, Anthropic's error
# types, Google's JSON API reasons, Azure's ARM and Storage error codes.
PROVIDER_CODES: Final = MappingProxyType(
    {
        # AWS throttling (botocore.retries.standard _THROTTLED_ERROR_CODES)
        "Throttling": C.RATE_LIMITED,
        "ThrottlingException": C.RATE_LIMITED,
        "ThrottledException": C.RATE_LIMITED,
        "RequestThrottledException": C.RATE_LIMITED,
        "TooManyRequestsException": C.RATE_LIMITED,
        "ProvisionedThroughputExceededException": C.RATE_LIMITED,
        "TransactionInProgressException": C.RATE_LIMITED,
        "RequestLimitExceeded": C.RATE_LIMITED,
        "BandwidthLimitExceeded": C.RATE_LIMITED,
        "LimitExceededException": C.RATE_LIMITED,
        "RequestThrottled": C.RATE_LIMITED,
        "SlowDown": C.RATE_LIMITED,
        "PriorRequestNotComplete": C.RATE_LIMITED,
        "EC2ThrottledException": C.RATE_LIMITED,
        # AWS transient and timeouts (botocore _TRANSIENT_ERROR_CODES and friends)
        "RequestTimeout": C.TIMEOUT,
        "RequestTimeoutException": C.TIMEOUT,
        "IDPCommunicationError": C.TRANSIENT,
        "InternalError": C.SERVER_FAULT,
        "InternalFailure": C.SERVER_FAULT,
        "InternalServerError": C.SERVER_FAULT,
        "ServiceUnavailable": C.SERVER_FAULT,
        "ServiceUnavailableException": C.SERVER_FAULT,
        "ServiceException": C.SERVER_FAULT,
        # AWS credentials
        "AccessDenied": C.AUTH_FAILURE,
        "AccessDeniedException": C.AUTH_FAILURE,
        "UnrecognizedClientException": C.AUTH_FAILURE,
        "InvalidAccessKeyId": C.AUTH_FAILURE,
        "InvalidClientTokenId": C.AUTH_FAILURE,
        "InvalidToken": C.AUTH_FAILURE,
        "SignatureDoesNotMatch": C.AUTH_FAILURE,
        "IncompleteSignature": C.AUTH_FAILURE,
        "InvalidSignatureException": C.AUTH_FAILURE,
        "MissingAuthenticationToken": C.AUTH_FAILURE,
        "AuthFailure": C.AUTH_FAILURE,
        "UnauthorizedOperation": C.AUTH_FAILURE,
        "NotAuthorizedException": C.AUTH_FAILURE,
        "RequestExpired": C.AUTH_FAILURE,
        "TokenRefreshRequired": C.AUTH_FAILURE,
        "AuthorizationError": C.AUTH_FAILURE,  # SNS, a 403
        "ForbiddenException": C.AUTH_FAILURE,  # API Gateway
        "UnauthorizedException": C.AUTH_FAILURE,
        "InvalidIdentityToken": C.AUTH_FAILURE,  # STS AssumeRoleWithWebIdentity, a 400
        "IDPRejectedClaim": C.AUTH_FAILURE,
        "InvalidGrantTokenException": C.AUTH_FAILURE,  # KMS
        "InvalidSecurity": C.AUTH_FAILURE,  # SQS
        "InvalidAuthenticationCode": C.AUTH_FAILURE,  # IAM MFA
        "OptInRequired": C.AUTH_FAILURE,  # the account is not subscribed to the service
        "Blocked": C.AUTH_FAILURE,
        "AccountProblem": C.AUTH_FAILURE,  # S3
        "AllAccessDisabled": C.AUTH_FAILURE,  # S3
        "DisabledException": C.AUTH_FAILURE,  # KMS: the key is disabled for this use
        "KMSAccessDeniedException": C.AUTH_FAILURE,  # Lambda, a 502
        "EC2AccessDeniedException": C.AUTH_FAILURE,  # Lambda, a 502
        # AWS missing targets (each a 400 in its service unless said otherwise)
        "NotFound": C.RESOURCE_MISSING,
        "ResourceNotFoundException": C.RESOURCE_MISSING,
        "NotFoundException": C.RESOURCE_MISSING,  # KMS, and the Lambda, ECS, Glue families
        "QueueDoesNotExist": C.RESOURCE_MISSING,  # SQS (JSON protocol)
        "NonExistentQueue": C.RESOURCE_MISSING,  # SQS (query protocol, after its namespace)
        "NoSuchEntity": C.RESOURCE_MISSING,  # IAM, a 404
        # AWS request errors
        "ValidationException": C.INVALID_INPUT,
        "ValidationError": C.INVALID_INPUT,
        "SerializationException": C.INVALID_INPUT,
        "MissingParameter": C.INVALID_INPUT,
        "MalformedPolicyDocument": C.INVALID_INPUT,
        "MalformedXML": C.INVALID_INPUT,
        "ConditionalCheckFailedException": C.INVALID_INPUT,
        "ConflictException": C.INVALID_INPUT,
        "ResourceInUseException": C.INVALID_INPUT,
        "BucketAlreadyExists": C.INVALID_INPUT,
        "EntityAlreadyExists": C.INVALID_INPUT,
        "PreconditionFailed": C.INVALID_INPUT,
        # OpenAI error codes; insufficient_quota (a 429) is a balance no wait refills.
        "rate_limit_exceeded": C.RATE_LIMITED,
        "insufficient_quota": C.AUTH_FAILURE,
        "billing_hard_limit_reached": C.AUTH_FAILURE,
        "account_deactivated": C.AUTH_FAILURE,
        "invalid_api_key": C.AUTH_FAILURE,
        "invalid_organization": C.AUTH_FAILURE,
        "model_not_found": C.RESOURCE_MISSING,
        "context_length_exceeded": C.INVALID_INPUT,
        "string_above_max_length": C.INVALID_INPUT,
        "server_error": C.SERVER_FAULT,
        "engine_overloaded": C.SERVER_FAULT,
        # Anthropic error types (docs: API errors)
        "rate_limit_error": C.RATE_LIMITED,
        "overloaded_error": C.SERVER_FAULT,
        "authentication_error": C.AUTH_FAILURE,
        "permission_error": C.AUTH_FAILURE,
        "billing_error": C.AUTH_FAILURE,
        "not_found_error": C.RESOURCE_MISSING,
        "request_too_large": C.INVALID_INPUT,
        "timeout_error": C.TIMEOUT,
        # Google JSON API legacy reasons and ErrorInfo reasons
        "rateLimitExceeded": C.RATE_LIMITED,
        "userRateLimitExceeded": C.RATE_LIMITED,
        "RATE_LIMIT_EXCEEDED": C.RATE_LIMITED,
        "backendError": C.SERVER_FAULT,
        "authError": C.AUTH_FAILURE,
        "ACCESS_TOKEN_EXPIRED": C.AUTH_FAILURE,
        "API_KEY_INVALID": C.AUTH_FAILURE,
        "notFound": C.RESOURCE_MISSING,
        "forbidden": C.AUTH_FAILURE,
        "insufficientPermissions": C.AUTH_FAILURE,
        "accessNotConfigured": C.AUTH_FAILURE,  # the API is not enabled for the project
        "SERVICE_DISABLED": C.AUTH_FAILURE,
        "BILLING_DISABLED": C.AUTH_FAILURE,
        "IAM_PERMISSION_DENIED": C.AUTH_FAILURE,
        "CONSUMER_INVALID": C.AUTH_FAILURE,
        # Azure (ARM and Storage error codes)
        "AuthenticationFailed": C.AUTH_FAILURE,
        "AuthorizationFailed": C.AUTH_FAILURE,
        "AuthorizationPermissionMismatch": C.AUTH_FAILURE,
        "InsufficientAccountPermissions": C.AUTH_FAILURE,
        "InvalidAuthenticationInfo": C.AUTH_FAILURE,
        "InvalidAuthenticationTokenTenant": C.AUTH_FAILURE,
        "ExpiredAuthenticationToken": C.AUTH_FAILURE,
        "KeyBasedAuthenticationNotPermitted": C.AUTH_FAILURE,
    }
)

# A namespaced code ("com.amazonaws.kms#NotFoundException") is also looked up by its last part.
CODE_NAMESPACE_SEPARATORS: Final = ("#", ".")

# Suffixes and prefixes of the AWS and Azure code families, tried in order after an exact miss.
PROVIDER_CODE_SUFFIXES: Final = (
    ("NotFound", C.RESOURCE_MISSING),
    ("NotFoundException", C.RESOURCE_MISSING),
    ("NotFoundFault", C.RESOURCE_MISSING),
    ("DoesNotExist", C.RESOURCE_MISSING),
    ("DoesNotExistException", C.RESOURCE_MISSING),
    ("AccessDeniedException", C.AUTH_FAILURE),
    ("Denied", C.AUTH_FAILURE),  # Redshift's AccessToClusterDenied, SNS's KMSAccessDenied
    ("DeniedFault", C.AUTH_FAILURE),  # the query services' Fault spelling (DMS, Redshift)
    ("ThrottledException", C.RATE_LIMITED),
    ("LimitExceeded", C.RATE_LIMITED),
)
PROVIDER_CODE_PREFIXES: Final = (
    ("Throttling", C.RATE_LIMITED),
    ("ExpiredToken", C.AUTH_FAILURE),
    ("AccessDenied", C.AUTH_FAILURE),
    ("NotAuthorized", C.AUTH_FAILURE),
    ("Unauthorized", C.AUTH_FAILURE),
    ("NoSuch", C.RESOURCE_MISSING),
    ("NonExistent", C.RESOURCE_MISSING),
)

# Words inside the access-denied codes of services beyond IAM and S3, tried after the suffixes and
# prefixes (from botocore's service models: KmsAccessDenied, S3AccessDeniedFault,
# SNSNoAuthorization, AccessForbidden, InsufficientPermissionsException, ...).
PROVIDER_CODE_INFIXES: Final = (
    ("AccessDenied", C.AUTH_FAILURE),
    ("NoAuthorization", C.AUTH_FAILURE),
    ("Forbidden", C.AUTH_FAILURE),
    ("InsufficientPermission", C.AUTH_FAILURE),
    ("MissingPermission", C.AUTH_FAILURE),
    ("AuthorizationError", C.AUTH_FAILURE),
    ("AuthenticationCredential", C.AUTH_FAILURE),
    ("InvalidCredentials", C.AUTH_FAILURE),
    ("SubjectCredentials", C.AUTH_FAILURE),
)

# Prefixes that say only what any 4xx says already, so they decide only without a status.
GENERIC_PROVIDER_CODE_PREFIXES: Final = (
    ("Invalid", C.INVALID_INPUT),
    ("Malformed", C.INVALID_INPUT),
)

# Too generic to beat the status they come with (OpenAI's for a 404 model as for a 400).
GENERIC_PROVIDER_CODES: Final = MappingProxyType(
    {
        "invalid_request_error": C.INVALID_INPUT,
        "api_error": C.SERVER_FAULT,
        "internal_error": C.SERVER_FAULT,
    }
)

# Provider codes of a retryable category whose condition never clears by waiting.
NON_RETRYABLE_CODES: Final = frozenset({"UNIMPLEMENTED"})

# PostgreSQL SQLSTATE (appendix A of the PostgreSQL manual): exact codes, then the class.
SQLSTATE_CODES: Final = MappingProxyType(
    {
        "40001": C.TRANSIENT,  # serialization_failure: retry the transaction
        "40P01": C.TRANSIENT,  # deadlock_detected
        "55P03": C.TRANSIENT,  # lock_not_available
        "57014": C.TIMEOUT,  # query_canceled (statement_timeout)
        "57P01": C.TRANSIENT,  # admin_shutdown
        "57P02": C.TRANSIENT,  # crash_shutdown
        "57P03": C.TRANSIENT,  # cannot_connect_now
        "53300": C.RATE_LIMITED,  # too_many_connections
        "42501": C.AUTH_FAILURE,  # insufficient_privilege
        "3D000": C.RESOURCE_MISSING,  # invalid_catalog_name: the database does not exist
        "42P01": C.RESOURCE_MISSING,  # undefined_table, as MySQL's 1146 no such table
        "25P03": C.TIMEOUT,  # idle_in_transaction_session_timeout
    }
)
SQLSTATE_CLASSES: Final = MappingProxyType(
    {
        "08": C.TRANSIENT,  # connection exception
        "22": C.INVALID_INPUT,  # data exception
        "23": C.INVALID_INPUT,  # integrity constraint violation
        "28": C.AUTH_FAILURE,  # invalid authorization specification
        "42": C.INVALID_INPUT,  # syntax error or access rule violation
        "53": C.SERVER_FAULT,  # insufficient resources
        "58": C.SERVER_FAULT,  # system error
        "XX": C.SERVER_FAULT,  # internal error
    }
)


def status_category(status: int) -> C | None:
    """Return the category of an HTTP status, or None if it is not a failure status (< 400)."""
    category = HTTP_STATUS.get(status)
    if category is not None:
        return category
    if 400 <= status < 500:
        return C.INVALID_INPUT
    if 500 <= status < 600:
        return C.SERVER_FAULT
    return None


def provider_code_category(code: str) -> C | None:
    """Return the category of a specific provider error code, or None if no table knows it."""
    category = PROVIDER_CODES.get(code) or GRPC_STATUS.get(code)
    if category is not None or len(code) > 128:
        return category
    for separator in CODE_NAMESPACE_SEPARATORS:
        if separator in code:
            category = PROVIDER_CODES.get(code.rpartition(separator)[2])
            if category is not None:
                return category
    for suffix, category in PROVIDER_CODE_SUFFIXES:
        if code.endswith(suffix):
            return category
    for prefix, category in PROVIDER_CODE_PREFIXES:
        if code.startswith(prefix):
            return category
    for infix, category in PROVIDER_CODE_INFIXES:
        if infix in code:
            return category
    return None


def generic_code_category(code: str) -> C | None:
    """Return the category of a generic provider code (one that never beats a status), or None."""
    category = GENERIC_PROVIDER_CODES.get(code)
    if category is not None or len(code) > 128:
        return category
    for prefix, category in GENERIC_PROVIDER_CODE_PREFIXES:
        if code.startswith(prefix):
            return category
    return None


def sqlstate_category(sqlstate: str) -> C | None:
    """Return the category of a PostgreSQL SQLSTATE, or None if it is unknown or malformed."""
    if len(sqlstate) != 5:
        return None
    return SQLSTATE_CODES.get(sqlstate) or SQLSTATE_CLASSES.get(sqlstate[:2])
