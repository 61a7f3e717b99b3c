"""The core rules as ordered data tables, and the small lookups that read them: which evidence
means which failure category, and which categories are retryable by default. Each table says
where its entries come from. Three rooms: `codes` (HTTP statuses, gRPC statuses, provider codes,
SQLSTATEs), `exceptions` (exception classes, class names, message phrases) and `retryable`.
Not here: the reply codes of other protocols (TLS, MySQL, AMQP, SMTP, FTP, SSH:
`classifier.protocols`), reading an exception (`classifier.signals`), weighing evidence against
other evidence (`classifier.judge`), and provider-specific quirks (498 token expired, 420
enhance-your-calm, an SDK's private error names), which callers register as overrides
(`classifier.overrides.Overrides`), consulted before these tables.
"""

from classifier.rules.codes import (
    CODE_NAMESPACE_SEPARATORS,
    GENERIC_PROVIDER_CODE_PREFIXES,
    GENERIC_PROVIDER_CODES,
    GRPC_STATUS,
    HTTP_STATUS,
    NON_RETRYABLE_CODES,
    NON_RETRYABLE_STATUS,
    PROVIDER_CODE_PREFIXES,
    PROVIDER_CODE_SUFFIXES,
    PROVIDER_CODES,
    SQLSTATE_CLASSES,
    SQLSTATE_CODES,
    generic_code_category,
    provider_code_category,
    sqlstate_category,
    status_category,
)
from classifier.rules.exceptions import (
    CLASS_NAME_PATTERNS,
    CODE_IS_NOT_EVIDENCE,
    EXCEPTION_TYPES,
    FALLBACK_TYPES,
    MESSAGE_PATTERNS,
    class_name_category,
    message_category,
)
from classifier.rules.retryable import DEFAULT_RETRYABLE, RETRYABLE

__all__ = [
    "CLASS_NAME_PATTERNS",
    "CODE_IS_NOT_EVIDENCE",
    "CODE_NAMESPACE_SEPARATORS",
    "DEFAULT_RETRYABLE",
    "EXCEPTION_TYPES",
    "FALLBACK_TYPES",
    "GENERIC_PROVIDER_CODES",
    "GENERIC_PROVIDER_CODE_PREFIXES",
    "GRPC_STATUS",
    "HTTP_STATUS",
    "MESSAGE_PATTERNS",
    "NON_RETRYABLE_CODES",
    "NON_RETRYABLE_STATUS",
    "PROVIDER_CODES",
    "PROVIDER_CODE_PREFIXES",
    "PROVIDER_CODE_SUFFIXES",
    "RETRYABLE",
    "SQLSTATE_CLASSES",
    "SQLSTATE_CODES",
    "class_name_category",
    "generic_code_category",
    "message_category",
    "provider_code_category",
    "sqlstate_category",
    "status_category",
]
