"""The reply codes of the protocols beside HTTP (TLS, MySQL, AMQP, SMTP, FTP, SSH, PostgreSQL's
connection messages): which exception classes carry one and where, and what each code means."""

from __future__ import annotations

import re
from enum import StrEnum
from types import MappingProxyType
from typing import Final, NamedTuple

from classifier.rules import sqlstate_category
from classifier.taxonomy import FailureCategory as C


class Family(StrEnum):
    TLS = "tls"
    MYSQL = "mysql"
    AMQP = "amqp"
    SMTP = "smtp"
    FTP = "ftp"
    SSH = "ssh"
    SQLSTATE = "sqlstate"


class Read(StrEnum):
    """Where on the exception the code of its family sits."""

    ATTRIBUTE = "attribute"
    FIRST_ARG = "first_arg"  # args[0], an int (PyMySQL, mysqlclient)
    MESSAGE_PREFIX = "message_prefix"  # the three digits that open the message (ftplib)
    PER_ADDRESS = "per_address"  # a dict of address -> (code, text) (smtplib)
    SERVER_MESSAGE = "server_message"  # a server message whose code the driver dropped (libpq)


class CodeSource(NamedTuple):
    family: Family
    read: Read
    attribute: str = ""


# Classes (matched anywhere in the MRO) that carry a code of a family. Sources: each library as
# installed.
CODE_SOURCES: Final = MappingProxyType(
    {
        "ssl.SSLError": CodeSource(Family.TLS, Read.ATTRIBUTE, "reason"),
        # Not their `sqlstate`: 1049 unknown database is "42000", a syntax class.
        "pymysql.err.MySQLError": CodeSource(Family.MYSQL, Read.FIRST_ARG),
        "MySQLdb._exceptions.MySQLError": CodeSource(Family.MYSQL, Read.FIRST_ARG),
        "mysql.connector.errors.Error": CodeSource(Family.MYSQL, Read.ATTRIBUTE, "errno"),
        "mariadb.Error": CodeSource(Family.MYSQL, Read.ATTRIBUTE, "errno"),
        "amqp.exceptions.AMQPError": CodeSource(Family.AMQP, Read.ATTRIBUTE, "reply_code"),
        "pika.exceptions.ChannelClosed": CodeSource(Family.AMQP, Read.ATTRIBUTE, "reply_code"),
        "pika.exceptions.ConnectionClosed": CodeSource(Family.AMQP, Read.ATTRIBUTE, "reply_code"),
        "smtplib.SMTPRecipientsRefused": CodeSource(Family.SMTP, Read.PER_ADDRESS, "recipients"),
        "smtplib.SMTPResponseException": CodeSource(Family.SMTP, Read.ATTRIBUTE, "smtp_code"),
        "ftplib.Error": CodeSource(Family.FTP, Read.MESSAGE_PREFIX),
        "paramiko.ssh_exception.ChannelException": CodeSource(Family.SSH, Read.ATTRIBUTE, "code"),
        # libpq keeps only the server's text: SERVER_MESSAGES recovers the SQLSTATE from it.
        "psycopg.OperationalError": CodeSource(Family.SQLSTATE, Read.SERVER_MESSAGE),
        "psycopg2.OperationalError": CodeSource(Family.SQLSTATE, Read.SERVER_MESSAGE),
    }
)

# OpenSSL reason names (ssl.SSLError.reason). A failed verification fails the same way on every
# retry, so AUTH_FAILURE whatever wraps it; a protocol mismatch is configuration.
TLS_REASONS: Final = MappingProxyType(
    {
        "CERTIFICATE_VERIFY_FAILED": C.AUTH_FAILURE,  # SSLCertVerificationError, any cause
        "TLSV13_ALERT_CERTIFICATE_REQUIRED": C.AUTH_FAILURE,  # the server wants our certificate
        "SSLV3_ALERT_HANDSHAKE_FAILURE": C.AUTH_FAILURE,  # TLS 1.2: no client certificate
        "SSLV3_ALERT_BAD_CERTIFICATE": C.AUTH_FAILURE,  # the server refused our certificate
        "SSLV3_ALERT_CERTIFICATE_EXPIRED": C.AUTH_FAILURE,
        "SSLV3_ALERT_CERTIFICATE_REVOKED": C.AUTH_FAILURE,
        "SSLV3_ALERT_CERTIFICATE_UNKNOWN": C.AUTH_FAILURE,
        "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE": C.AUTH_FAILURE,
        "TLSV1_ALERT_UNKNOWN_CA": C.AUTH_FAILURE,  # the server does not trust our issuer
        "TLSV1_ALERT_ACCESS_DENIED": C.AUTH_FAILURE,
        "CA_MD_TOO_WEAK": C.AUTH_FAILURE,
        "EE_KEY_TOO_SMALL": C.AUTH_FAILURE,
        "CA_KEY_TOO_SMALL": C.AUTH_FAILURE,
        "WRONG_VERSION_NUMBER": C.INVALID_INPUT,  # TLS to a plain-text port (https:// on http)
        "UNSUPPORTED_PROTOCOL": C.INVALID_INPUT,
        "TLSV1_ALERT_PROTOCOL_VERSION": C.INVALID_INPUT,
        "NO_PROTOCOLS_AVAILABLE": C.INVALID_INPUT,
        "NO_CIPHERS_AVAILABLE": C.INVALID_INPUT,
        "TLSV1_ALERT_INTERNAL_ERROR": C.SERVER_FAULT,
        # Not UNEXPECTED_EOF_WHILE_READING: as a code it would outweigh an outer timeout.
    }
)

# MySQL and MariaDB error numbers: server errors (1000-1999, 3000+, MariaDB's 4000+) and client
# errors (CR_*, 2000-2999), from the servers' error-message references.
MYSQL_ERRORS: Final = MappingProxyType(
    {
        1044: C.AUTH_FAILURE,  # ER_DBACCESS_DENIED_ERROR
        1045: C.AUTH_FAILURE,  # ER_ACCESS_DENIED_ERROR (wrong password)
        1129: C.AUTH_FAILURE,  # ER_HOST_IS_BLOCKED: an administrator must flush hosts
        1130: C.AUTH_FAILURE,  # ER_HOST_NOT_PRIVILEGED
        1142: C.AUTH_FAILURE,  # ER_TABLEACCESS_DENIED_ERROR
        1143: C.AUTH_FAILURE,  # ER_COLUMNACCESS_DENIED_ERROR
        1227: C.AUTH_FAILURE,  # ER_SPECIFIC_ACCESS_DENIED_ERROR
        1251: C.AUTH_FAILURE,  # ER_NOT_SUPPORTED_AUTH_MODE
        1370: C.AUTH_FAILURE,  # ER_PROCACCESS_DENIED_ERROR
        1698: C.AUTH_FAILURE,  # ER_ACCESS_DENIED_NO_PASSWORD_ERROR (unknown user, too)
        1820: C.AUTH_FAILURE,  # ER_MUST_CHANGE_PASSWORD
        1862: C.AUTH_FAILURE,  # ER_MUST_CHANGE_PASSWORD_LOGIN
        3118: C.AUTH_FAILURE,  # ER_ACCOUNT_HAS_BEEN_LOCKED (MySQL)
        4151: C.AUTH_FAILURE,  # ER_ACCOUNT_HAS_BEEN_LOCKED (MariaDB)
        2059: C.AUTH_FAILURE,  # CR_AUTH_PLUGIN_CANNOT_LOAD
        2061: C.AUTH_FAILURE,  # CR_AUTH_PLUGIN_ERR
        1049: C.RESOURCE_MISSING,  # ER_BAD_DB_ERROR: unknown database
        1051: C.RESOURCE_MISSING,  # ER_BAD_TABLE_ERROR: unknown table
        1109: C.RESOURCE_MISSING,  # ER_UNKNOWN_TABLE
        1146: C.RESOURCE_MISSING,  # ER_NO_SUCH_TABLE
        1305: C.RESOURCE_MISSING,  # ER_SP_DOES_NOT_EXIST
        1007: C.INVALID_INPUT,  # ER_DB_CREATE_EXISTS
        1048: C.INVALID_INPUT,  # ER_BAD_NULL_ERROR
        1050: C.INVALID_INPUT,  # ER_TABLE_EXISTS_ERROR
        1054: C.INVALID_INPUT,  # ER_BAD_FIELD_ERROR: unknown column
        1062: C.INVALID_INPUT,  # ER_DUP_ENTRY
        1064: C.INVALID_INPUT,  # ER_PARSE_ERROR
        1136: C.INVALID_INPUT,  # ER_WRONG_VALUE_COUNT_ON_ROW
        1264: C.INVALID_INPUT,  # ER_WARN_DATA_OUT_OF_RANGE
        1265: C.INVALID_INPUT,  # WARN_DATA_TRUNCATED
        1292: C.INVALID_INPUT,  # ER_TRUNCATED_WRONG_VALUE
        1364: C.INVALID_INPUT,  # ER_NO_DEFAULT_FOR_FIELD
        1366: C.INVALID_INPUT,  # ER_TRUNCATED_WRONG_VALUE_FOR_FIELD
        1406: C.INVALID_INPUT,  # ER_DATA_TOO_LONG
        1451: C.INVALID_INPUT,  # ER_ROW_IS_REFERENCED_2
        1452: C.INVALID_INPUT,  # ER_NO_REFERENCED_ROW_2
        1040: C.RATE_LIMITED,  # ER_CON_COUNT_ERROR: too many connections
        1203: C.RATE_LIMITED,  # ER_TOO_MANY_USER_CONNECTIONS
        1226: C.RATE_LIMITED,  # ER_USER_LIMIT_REACHED (max_queries_per_hour, ...)
        1205: C.TIMEOUT,  # ER_LOCK_WAIT_TIMEOUT
        1317: C.TIMEOUT,  # ER_QUERY_INTERRUPTED, as PostgreSQL's query_canceled
        1969: C.TIMEOUT,  # ER_STATEMENT_TIMEOUT (MariaDB max_statement_time)
        3024: C.TIMEOUT,  # ER_QUERY_TIMEOUT (MySQL max_execution_time)
        1213: C.TRANSIENT,  # ER_LOCK_DEADLOCK: retry the transaction
        1053: C.TRANSIENT,  # ER_SERVER_SHUTDOWN
        1152: C.TRANSIENT,  # ER_ABORTING_CONNECTION
        1158: C.TRANSIENT,  # ER_NET_READ_ERROR
        1159: C.TRANSIENT,  # ER_NET_READ_INTERRUPTED
        1160: C.TRANSIENT,  # ER_NET_ERROR_ON_WRITE
        1161: C.TRANSIENT,  # ER_NET_WRITE_INTERRUPTED
        1184: C.TRANSIENT,  # ER_NEW_ABORTING_CONNECTION
        1290: C.TRANSIENT,  # ER_OPTION_PREVENTS_STATEMENT (--read-only during a failover)
        1836: C.TRANSIENT,  # ER_READ_ONLY_MODE
        2002: C.TRANSIENT,  # CR_CONNECTION_ERROR (socket)
        2003: C.TRANSIENT,  # CR_CONN_HOST_ERROR (TCP)
        2005: C.TRANSIENT,  # CR_UNKNOWN_HOST
        2006: C.TRANSIENT,  # CR_SERVER_GONE_ERROR
        2013: C.TRANSIENT,  # CR_SERVER_LOST
        2055: C.TRANSIENT,  # CR_SERVER_LOST_EXTENDED
        1021: C.SERVER_FAULT,  # ER_DISK_FULL
        1030: C.SERVER_FAULT,  # ER_GET_ERRNO: the storage engine failed
        1037: C.SERVER_FAULT,  # ER_OUTOFMEMORY
        1038: C.SERVER_FAULT,  # ER_OUT_OF_SORTMEMORY
        1041: C.SERVER_FAULT,  # ER_OUT_OF_RESOURCES
        1114: C.SERVER_FAULT,  # ER_RECORD_FILE_FULL: the table is full
    }
)

# AMQP 0-9-1 reply codes (the specification's constants). RabbitMQ answers 530 also for a virtual
# host that does not exist, so AUTH_FAILURE.
AMQP_REPLY_CODES: Final = MappingProxyType(
    {
        311: C.INVALID_INPUT,  # content-too-large
        312: C.RESOURCE_MISSING,  # no-route: a mandatory message matched no queue
        313: C.TRANSIENT,  # no-consumers
        320: C.TRANSIENT,  # connection-forced: an operator or a restart closed it
        402: C.RESOURCE_MISSING,  # invalid-path: unknown virtual host
        403: C.AUTH_FAILURE,  # access-refused
        404: C.RESOURCE_MISSING,  # not-found: exchange or queue
        405: C.TRANSIENT,  # resource-locked: an exclusive queue held by another connection
        406: C.INVALID_INPUT,  # precondition-failed: a redeclare with other arguments
        501: C.INVALID_INPUT,  # frame-error
        502: C.INVALID_INPUT,  # syntax-error
        503: C.INVALID_INPUT,  # command-invalid
        504: C.TRANSIENT,  # channel-error: reopen the channel
        505: C.INVALID_INPUT,  # unexpected-frame
        506: C.SERVER_FAULT,  # resource-error: the broker ran out of a resource
        530: C.AUTH_FAILURE,  # not-allowed
        540: C.INVALID_INPUT,  # not-implemented
        541: C.SERVER_FAULT,  # internal-error
    }
)

# SMTP reply codes (RFC 5321 section 4.2, RFC 4954 for AUTH); others fall back on REPLY_CLASSES.
SMTP_REPLY_CODES: Final = MappingProxyType(
    {
        421: C.TRANSIENT,  # service not available, closing the channel
        450: C.TRANSIENT,  # mailbox busy (or greylisted)
        451: C.SERVER_FAULT,  # local error in processing
        452: C.SERVER_FAULT,  # insufficient system storage
        454: C.TRANSIENT,  # temporary authentication failure
        530: C.AUTH_FAILURE,  # authentication required
        534: C.AUTH_FAILURE,  # authentication mechanism too weak
        535: C.AUTH_FAILURE,  # authentication credentials invalid
        538: C.AUTH_FAILURE,  # encryption required for the mechanism
        550: C.RESOURCE_MISSING,  # mailbox unavailable (no such user)
        551: C.RESOURCE_MISSING,  # user not local
        552: C.INVALID_INPUT,  # exceeded storage allocation (usually: the message is too big)
        553: C.INVALID_INPUT,  # mailbox name not allowed
        554: C.INVALID_INPUT,  # transaction failed
    }
)

# FTP reply codes (RFC 959 section 4.2, RFC 2228 for 534); 430 is common outside the RFC.
FTP_REPLY_CODES: Final = MappingProxyType(
    {
        421: C.TRANSIENT,  # service not available, closing the control connection
        425: C.TRANSIENT,  # cannot open the data connection
        426: C.TRANSIENT,  # connection closed, transfer aborted
        430: C.AUTH_FAILURE,  # invalid user name or password
        434: C.TRANSIENT,  # requested host unavailable
        450: C.TRANSIENT,  # file unavailable (busy)
        451: C.SERVER_FAULT,  # local error in processing
        452: C.SERVER_FAULT,  # insufficient storage space
        530: C.AUTH_FAILURE,  # not logged in
        532: C.AUTH_FAILURE,  # need an account for storing files
        534: C.AUTH_FAILURE,  # request denied for policy reasons
        550: C.RESOURCE_MISSING,  # file unavailable (not found)
        551: C.INVALID_INPUT,  # page type unknown
        552: C.INVALID_INPUT,  # exceeded storage allocation
        553: C.INVALID_INPUT,  # file name not allowed
    }
)

# Replies whose code covers several conditions that its text tells apart, each text a lowercase
# substring: FTP servers answer 550 for a missing file and for a refused permission alike
# (pyftpdlib "Not enough privileges.", vsftpd "Permission denied."), and MySQL's client errors
# 2003/2013 say the connection failed, their text whether by a timeout.
REPLY_TEXTS: Final = MappingProxyType(
    {
        (Family.FTP, 550): (
            ("permission denied", C.AUTH_FAILURE),
            ("not enough privileges", C.AUTH_FAILURE),
            ("access denied", C.AUTH_FAILURE),
            ("access is denied", C.AUTH_FAILURE),
            ("not permitted", C.AUTH_FAILURE),
            ("forbidden", C.AUTH_FAILURE),
        ),
        (Family.FTP, 553): (("permission denied", C.AUTH_FAILURE),),
        (Family.MYSQL, 2002): (("timed out", C.TIMEOUT),),
        (Family.MYSQL, 2003): (("timed out", C.TIMEOUT), ("(110)", C.TIMEOUT)),
        (Family.MYSQL, 2013): (("timed out", C.TIMEOUT), ("system error: 110", C.TIMEOUT)),
    }
)

# The first digit of an SMTP or FTP reply the tables above do not list (RFC 5321, RFC 959).
REPLY_CLASSES: Final = MappingProxyType({"4": C.TRANSIENT, "5": C.INVALID_INPUT})

# SSH channel-open failure reasons (RFC 4254 section 5.1), paramiko's ChannelException.code.
SSH_CHANNEL_CODES: Final = MappingProxyType(
    {
        1: C.AUTH_FAILURE,  # administratively prohibited
        2: C.TRANSIENT,  # connect failed (the forwarded target refused)
        3: C.INVALID_INPUT,  # unknown channel type
        4: C.SERVER_FAULT,  # resource shortage
    }
)

# PostgreSQL's connection-time FATAL texts (in English, from its error reporting) and the SQLSTATE
# the server sent with each, for drivers that keep only the text.
SERVER_MESSAGES: Final = (
    (r'FATAL:  password authentication failed for user "', "28P01"),
    (r'FATAL:  role "[^"]*" does not exist', "28000"),
    (r'FATAL:  role "[^"]*" is not permitted to log in', "28000"),
    (r"FATAL:  no pg_hba\.conf entry for ", "28000"),
    (r"FATAL:  pg_hba\.conf rejects connection ", "28000"),
    (r"FATAL:  [A-Za-z]+ authentication failed for user ", "28000"),
    (r'FATAL:  database "[^"]*" does not exist', "3D000"),
    (r"FATAL:  permission denied for database ", "42501"),
    (r"FATAL:  sorry, too many clients already", "53300"),
    (r"FATAL:  remaining connection slots are reserved", "53300"),
    (r"FATAL:  too many connections for (?:role|database) ", "53300"),
    (r"FATAL:  the database system is (?:starting up|shutting down|in recovery mode)", "57P03"),
)
_SERVER_MESSAGES: Final = tuple((re.compile(pattern), code) for pattern, code in SERVER_MESSAGES)

_NUMBERED: Final = MappingProxyType(
    {
        Family.MYSQL: MYSQL_ERRORS,
        Family.AMQP: AMQP_REPLY_CODES,
        Family.SMTP: SMTP_REPLY_CODES,
        Family.FTP: FTP_REPLY_CODES,
        Family.SSH: SSH_CHANNEL_CODES,
    }
)
_WITH_REPLY_CLASSES: Final = frozenset({Family.SMTP, Family.FTP})


def code_category(family: Family, code: str, message: str = "") -> C | None:
    """Return what `code` means in `family`'s table (refined by the reply's `message` where
    REPLY_TEXTS says so), or None if the table does not know it."""
    if family is Family.TLS:
        return TLS_REASONS.get(code)
    if family is Family.SQLSTATE:
        return sqlstate_category(code)
    table = _NUMBERED.get(family)
    if table is None or not code.isdigit() or len(code) > 6:
        return None
    texts = REPLY_TEXTS.get((family, int(code)))
    if texts and message:
        lowered = message[:500].lower()
        for text, category in texts:
            if text in lowered:
                return category
    category = table.get(int(code))
    if category is None and family in _WITH_REPLY_CLASSES and len(code) == 3:
        category = REPLY_CLASSES.get(code[0])
    return category


def sqlstate_in_message(message: str) -> str | None:
    """Return the SQLSTATE of the PostgreSQL connection message in `message`, if it is one."""
    if "FATAL:  " not in message:
        return None
    for pattern, code in _SERVER_MESSAGES:
        if pattern.search(message):
            return code
    return None


def reply_code_opening(message: str) -> str | None:
    """Return the three-digit reply code that opens `message` ("530 Login incorrect."), if any."""
    head = message[:4]
    if len(head) >= 3 and head[:3].isdigit() and head[:3].isascii() and head[3:] in ("", " ", "-"):
        return head[:3]
    return None
