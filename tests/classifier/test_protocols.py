"""The protocol families beside HTTP (classifier/protocols.py) and causes kept in containers:
the tables as their lookups read them, where each class keeps its code, and how a family's code
weighs against other evidence. The corpus (test_corpus.py) has the same families as real
library failures against real servers; here are the rules one at a time, on real exception
classes built the way their libraries build them."""

from __future__ import annotations

import ftplib
import smtplib
import ssl
import threading
from concurrent.futures import Future
from typing import Any

import pymysql
import pytest

from classifier import FailureCategory, Signal, classify, protocols
from classifier.described import classify_description
from classifier.protocols import Family

T = FailureCategory


@pytest.mark.parametrize(
    ("family", "code", "expected"),
    [
        (Family.TLS, "CERTIFICATE_VERIFY_FAILED", T.AUTH_FAILURE),
        (Family.TLS, "WRONG_VERSION_NUMBER", T.INVALID_INPUT),
        (Family.TLS, "NO_SUCH_REASON", None),
        (Family.MYSQL, "1045", T.AUTH_FAILURE),
        (Family.MYSQL, "1213", T.TRANSIENT),
        (Family.MYSQL, "99999", None),
        (Family.MYSQL, "abc", None),
        (Family.AMQP, "320", T.TRANSIENT),
        (Family.AMQP, "530", T.AUTH_FAILURE),
        (Family.SMTP, "535", T.AUTH_FAILURE),
        (Family.SMTP, "471", T.TRANSIENT),  # unlisted: the class of the reply, 4 is transient
        (Family.SMTP, "599", T.INVALID_INPUT),  # unlisted: 5 is permanent
        (Family.FTP, "530", T.AUTH_FAILURE),
        (Family.FTP, "550", T.RESOURCE_MISSING),
        (Family.FTP, "250", None),  # a positive reply is no failure
        (Family.AMQP, "499", None),  # AMQP has no reply classes
        (Family.SSH, "1", T.AUTH_FAILURE),
        (Family.SQLSTATE, "28000", T.AUTH_FAILURE),
        (Family.SQLSTATE, "3D000", T.RESOURCE_MISSING),
    ],
)
def test_each_family_reads_its_codes_in_its_own_table(
    family: Family, code: str, expected: T | None
) -> None:
    assert protocols.code_category(family, code) is expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("530 Login incorrect.", "530"),
        ("421-Too many users\n421 try later", "421"),
        ("550", "550"),
        ("5500 not a reply", None),
        ("Login incorrect (530)", None),
        ("", None),
    ],
)
def test_an_ftp_reply_code_is_the_number_that_opens_the_message(
    message: str, expected: str | None
) -> None:
    assert protocols.reply_code_opening(message) == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ('connection failed: FATAL:  role "x" does not exist', "28000"),
        ('FATAL:  password authentication failed for user "agent"', "28P01"),
        ('FATAL:  database "x" does not exist', "3D000"),
        ("FATAL:  sorry, too many clients already", "53300"),
        ("FATAL:  the database system is starting up", "57P03"),
        ('role "x" does not exist', None),  # not the server's connection message
        ("connection refused", None),
    ],
)
def test_libpq_connection_messages_give_back_the_servers_sqlstate(
    message: str, expected: str | None
) -> None:
    assert protocols.sqlstate_in_message(message) == expected


def cert_error(reason: str) -> ssl.SSLError:
    """An ssl error as the ssl module makes it: the OpenSSL reason on `.reason`."""
    error = ssl.SSLCertVerificationError(1, f"[SSL: {reason}] certificate verify failed")
    error.reason = reason
    error.library = "SSL"
    return error


def wrapped(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


def test_an_inner_tls_reason_beats_an_outer_connection_error() -> None:
    import httpx

    failure = classify(wrapped(httpx.ConnectError("ssl"), cert_error("CERTIFICATE_VERIFY_FAILED")))
    assert failure.category is T.AUTH_FAILURE
    assert failure.retryable is False
    assert failure.signal is Signal.PROVIDER_CODE
    assert failure.exception_type == "ssl.SSLCertVerificationError"


def test_a_tls_eof_stays_transient() -> None:
    error = ssl.SSLEOFError(8, "EOF occurred in violation of protocol")
    error.reason = "UNEXPECTED_EOF_WHILE_READING"
    assert classify(error).category is T.TRANSIENT


def test_a_mysql_number_beats_its_generic_sqlstate() -> None:
    error = pymysql.err.OperationalError(1049, "Unknown database 'x'")
    error.sqlstate = "42000"  # the syntax class, as PyMySQL sets it
    failure = classify(error)
    assert failure.category is T.RESOURCE_MISSING
    assert failure.provider_code == "1049"


def test_an_amqp_reply_code_is_never_read_as_an_http_status() -> None:
    import amqp.exceptions

    failure = classify(amqp.exceptions.ConnectionForced("broker shutdown", (10, 50)))
    assert failure.category is T.TRANSIENT  # 320 connection-forced
    assert failure.status_code is None
    assert failure.provider_code == "320"


def test_a_pika_channel_close_reads_its_reply_code() -> None:
    import pika.exceptions

    failure = classify(pika.exceptions.ChannelClosedByBroker(405, "RESOURCE_LOCKED - in use"))
    assert (failure.category, failure.provider_code) == (T.TRANSIENT, "405")


def test_an_smtp_reply_code_beats_the_message() -> None:
    error = smtplib.SMTPResponseException(535, b"5.7.8 not found")  # "not found" is a phrase
    assert classify(error).category is T.AUTH_FAILURE


def test_smtp_recipients_refused_reads_each_recipients_reply() -> None:
    error = smtplib.SMTPRecipientsRefused(
        {"a@x.test": ("junk", b"?"), "b@x.test": (550, b"5.1.1 unknown")}
    )
    failure = classify(error)
    assert (failure.category, failure.provider_code) == (T.RESOURCE_MISSING, "550")


def test_an_ftp_error_without_a_reply_code_falls_back_on_its_class() -> None:
    assert classify(ftplib.error_temp("try later")).category is T.TRANSIENT
    assert classify(ftplib.error_perm("???")).category is T.UNCLASSIFIED


def test_a_described_error_reads_its_code_in_its_class_family() -> None:
    failure = classify_description(
        {"exception_type": "smtplib.SMTPAuthenticationError", "provider_code": "535"}
    )
    assert failure.category is T.AUTH_FAILURE


def test_a_cloud_code_beats_the_status_it_arrives_with() -> None:
    from botocore.exceptions import ClientError

    reply = {
        "Error": {"Code": "KMSAccessDeniedException", "Message": "no"},
        "ResponseMetadata": {"HTTPStatusCode": 502},
    }
    failure = classify(ClientError(reply, "Invoke"))
    assert (failure.category, failure.status_code) == (T.AUTH_FAILURE, 502)


def test_a_generic_invalid_code_does_not_override_a_403() -> None:
    from botocore.exceptions import ClientError

    reply = {
        "Error": {"Code": "InvalidSomethingNew", "Message": "no"},
        "ResponseMetadata": {"HTTPStatusCode": 403},
    }
    assert classify(ClientError(reply, "Call")).category is T.AUTH_FAILURE


# --- causes kept in containers ------------------------------------------------------------------


def finished(exc: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(exc)
    return future


def test_a_tenacity_retry_error_without_a_cause_is_read_through_its_last_attempt() -> None:
    import tenacity

    attempt = tenacity.Future(attempt_number=3)
    attempt.set_exception(TimeoutError("deadline"))
    failure = classify(tenacity.RetryError(attempt))  # raised by hand: no __cause__
    assert failure.category is T.TIMEOUT
    assert failure.exception_type == "builtins.TimeoutError"


class Carrier(Exception):
    """An exception that keeps its causes in a container attribute, as libraries do."""

    def __init__(self, **attributes: Any) -> None:
        super().__init__("it failed")
        self.__dict__.update(attributes)


def test_a_dict_of_per_address_errors_is_followed() -> None:
    errors = {("127.0.0.1", 22): ConnectionRefusedError(111, "refused")}
    assert classify(Carrier(errors=errors)).category is T.TRANSIENT


def test_a_list_of_errors_is_followed_and_its_strongest_member_decides() -> None:
    import httpx

    request = httpx.Request("GET", "https://x.test")
    error = httpx.HTTPStatusError(
        "429", request=request, response=httpx.Response(429, request=request)
    )
    assert classify(Carrier(errors=[ValueError("x"), error])).category is T.RATE_LIMITED


def test_an_unfinished_future_is_never_waited_for() -> None:
    pending: Future[Any] = Future()
    done = threading.Event()

    def classify_it() -> None:
        classify(Carrier(last_attempt=pending))
        done.set()

    thread = threading.Thread(target=classify_it, daemon=True)
    thread.start()
    assert done.wait(timeout=5)
    assert classify(Carrier(last_attempt=pending)).category is T.UNCLASSIFIED


def test_a_cancelled_future_is_skipped() -> None:
    cancelled: Future[Any] = Future()
    cancelled.cancel()
    assert classify(Carrier(last_attempt=cancelled)).category is T.UNCLASSIFIED


def test_a_future_that_raises_when_read_counts_as_absent() -> None:
    class Hostile(Future):  # type: ignore[type-arg]
        def done(self) -> bool:
            raise RuntimeError("no")

    failure = classify(Carrier(last_attempt=Hostile(), reason=TimeoutError("t")))
    assert failure.category is T.TIMEOUT


def test_a_finished_future_in_a_container_is_read() -> None:
    assert classify(Carrier(last_attempt=finished(PermissionError("no")))).category is (
        T.AUTH_FAILURE
    )


def test_a_huge_container_is_cut() -> None:
    errors = [ValueError(str(i)) for i in range(10_000)] + [TimeoutError("late")]
    failure = classify(Carrier(errors=errors))
    assert failure.category is T.UNCLASSIFIED  # the timeout lies past what is read
    assert len(failure.chain) <= 32
