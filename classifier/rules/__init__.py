"""The core rules as ordered data tables: which evidence means which failure category, and which
categories are retryable by default. Provider quirks are registered as overrides instead."""

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
