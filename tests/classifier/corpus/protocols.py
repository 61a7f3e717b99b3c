"""Protocols beyond HTTP: AMQP reply codes (pika, kombu), SSH (paramiko), FTP and SMTP reply
codes."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tests.classifier.corpus.cases import (
    RABBITMQ,
    Call,
    Case,
    Prepare,
    T,
    calling,
)
from tests.classifier.faults import FaultEnv

# --- message brokers: AMQP reply codes through pika and kombu (py-amqp) -------------------------

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"


def _pika_parameters(port: int = 5672, password: str = "guest", vhost: str = "/") -> Any:
    import pika

    return pika.ConnectionParameters(
        host="127.0.0.1",
        port=port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials("guest", password),
        connection_attempts=1,
        socket_timeout=3,
        blocked_connection_timeout=3,
    )


def _pika_connect(password: str = "guest", vhost: str = "/", refused: bool = False) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import pika

        port = env.closed if refused else 5672
        parameters = _pika_parameters(port, password, vhost)
        return lambda: pika.BlockingConnection(parameters).close()

    return calling(make)


def _pika_channel(action: Callable[[Any], object]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import pika

        connection = pika.BlockingConnection(_pika_parameters())
        try:
            yield lambda: action(connection.channel())
        finally:
            connection.close()

    return prepare


def _kombu_connect(url: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import kombu

        def call() -> None:
            with kombu.Connection(url, connect_timeout=3) as connection:
                connection.connect()

        return call

    return calling(make)


def _kombu_channel(action: Callable[[Any], object]) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import kombu

        with kombu.Connection(AMQP_URL, connect_timeout=3) as connection:
            connection.connect()

            def call() -> None:
                channel = connection.channel()
                try:
                    action(channel)
                finally:
                    channel.close()

            yield call

    return prepare


@contextmanager
def _kombu_locked_queue(env: FaultEnv) -> Iterator[Call]:
    """A queue declared exclusive by one connection, declared again by another."""
    import kombu

    name = f"failsight-exclusive-{uuid.uuid4().hex[:12]}"
    with (
        kombu.Connection(AMQP_URL, connect_timeout=3) as owner,
        kombu.Connection(AMQP_URL, connect_timeout=3) as other,
    ):
        owner.default_channel.queue_declare(name, exclusive=True, auto_delete=True)
        yield lambda: other.channel().queue_declare(name, exclusive=True)


BROKERS = [
    Case(
        "pika: a wrong password is auth_failure",
        _pika_connect(password="wrong-password"),
        T.AUTH_FAILURE,
        needs=RABBITMQ,
        why="pika keeps the broker's 403 only in its ProbableAuthenticationError's text and class",
    ),
    Case(
        "pika: a missing virtual host (530 not-allowed) is auth_failure",
        _pika_connect(vhost="failsight-no-such-vhost"),
        T.AUTH_FAILURE,
        needs=RABBITMQ,
        why="RabbitMQ answers 530 alike for a missing vhost and one the user may not open",
    ),
    Case(
        "pika: a missing exchange (channel closed with 404) is resource_missing",
        _pika_channel(lambda ch: ch.exchange_declare("failsight-no-such-exchange", passive=True)),
        T.RESOURCE_MISSING,
        {"provider_code": "404", "signal": "provider_code"},
        needs=RABBITMQ,
        why="ChannelClosedByBroker.reply_code is AMQP's not-found",
    ),
    Case(
        "pika: redeclaring an exchange with another type (406) is invalid_input",
        _pika_channel(lambda ch: ch.exchange_declare("amq.direct", exchange_type="fanout")),
        T.INVALID_INPUT,
        {"provider_code": "406"},
        needs=RABBITMQ,
        why="precondition-failed: the declaration, not the broker, must change",
    ),
    Case(
        "pika: connection refused is transient",
        _pika_connect(refused=True),
        T.TRANSIENT,
        why="AMQPConnectionError: nothing listens yet",
    ),
    Case(
        "kombu: a wrong password (403 access-refused) is auth_failure",
        _kombu_connect("amqp://guest:wrong-password@127.0.0.1:5672//"),
        T.AUTH_FAILURE,
        {"provider_code": "403"},
        needs=RABBITMQ,
        why="py-amqp's AccessRefused carries reply_code 403",
    ),
    # 530 is AMQP's not-allowed, not an HTTP 5xx: it is not a server fault to retry.
    Case(
        "kombu: a missing virtual host (530) is auth_failure, not a server fault",
        _kombu_connect("amqp://guest:guest@127.0.0.1:5672/failsight-no-such-vhost"),
        T.AUTH_FAILURE,
        {"provider_code": "530", "status_code": None},
        needs=RABBITMQ,
        why="530 is AMQP's not-allowed; read as HTTP it was a 5xx to retry",
    ),
    Case(
        "kombu: a passive declare of a missing queue (404) is resource_missing",
        _kombu_channel(lambda ch: ch.queue_declare("failsight-no-such-queue", passive=True)),
        T.RESOURCE_MISSING,
        {"provider_code": "404"},
        needs=RABBITMQ,
        why="py-amqp's NotFound, reply_code 404",
    ),
    Case(
        "kombu: an inequivalent redeclare (406 precondition-failed) is invalid_input",
        _kombu_channel(lambda ch: ch.exchange_declare("amq.direct", "fanout")),
        T.INVALID_INPUT,
        {"provider_code": "406"},
        needs=RABBITMQ,
        why="py-amqp's PreconditionFailed",
    ),
    Case(
        "kombu: another connection's exclusive queue (405 resource-locked) is transient",
        _kombu_locked_queue,
        T.TRANSIENT,
        {"provider_code": "405"},
        needs=RABBITMQ,
        why="the lock goes when the owning connection does",
    ),
]


# --- SSH (paramiko) -----------------------------------------------------------------------------


@contextmanager
def _quiet_paramiko() -> Iterator[None]:
    """Silence paramiko's transport threads, which log the failures the cases cause on purpose."""
    logger = logging.getLogger("paramiko")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _ssh(scenario: str) -> Prepare:
    @contextmanager
    def prepare(env: FaultEnv) -> Iterator[Call]:
        import paramiko

        from tests.classifier.protocol_faults import SSH_PASSWORD, SSH_USER

        if scenario == "refused":
            port = env.closed
        elif scenario == "garbage":
            port = env.garbage()
        else:
            port = env.ssh().port
        client = paramiko.SSHClient()
        if scenario == "host-key":  # we know another key for this server: it cannot prove itself
            other = paramiko.ECDSAKey.generate()
            client.get_host_keys().add(f"[127.0.0.1]:{port}", other.get_name(), other)
        elif scenario != "unknown-host":
            client.set_missing_host_key_policy(paramiko.AutoAddPolicy())
        password = "wrong-password" if scenario == "password" else SSH_PASSWORD
        options = {"timeout": 2, "banner_timeout": 2, "auth_timeout": 2}

        def call() -> None:
            client.connect(
                "127.0.0.1",
                port=port,
                username=SSH_USER,
                password=password,
                look_for_keys=False,
                allow_agent=False,
                **options,
            )
            try:
                if scenario == "session":
                    client.exec_command("true", timeout=2)
                elif scenario == "forward":
                    client.get_transport().open_channel(
                        "direct-tcpip", ("127.0.0.1", env.closed), ("127.0.0.1", 0), timeout=2
                    )
            finally:
                client.close()

        with _quiet_paramiko():
            try:
                yield call
            finally:
                client.close()

    return prepare


SSH = [
    Case(
        "paramiko: a wrong password is auth_failure",
        _ssh("password"),
        T.AUTH_FAILURE,
        {"exception_type": "paramiko.ssh_exception.AuthenticationException"},
        why="AuthenticationException from the in-process server",
    ),
    Case(
        "paramiko: a host key other than the known one is auth_failure (BadHostKeyException)",
        _ssh("host-key"),
        T.AUTH_FAILURE,
        why="the server fails to prove who it is, as a TLS certificate that fails verification",
    ),
    Case(
        "paramiko: a host key not in known_hosts is auth_failure (the server is unproven)",
        _ssh("unknown-host"),
        T.AUTH_FAILURE,
        why="a plain SSHException; its 'not found' must not make it a missing resource",
    ),
    Case(
        "paramiko: a session channel refused (administratively prohibited) is auth_failure",
        _ssh("session"),
        T.AUTH_FAILURE,
        {"provider_code": "1"},
        why="ChannelException code 1: the server forbids it for this user",
    ),
    Case(
        "paramiko: a forwarded connection the target refused (connect failed) is transient",
        _ssh("forward"),
        T.TRANSIENT,
        {"provider_code": "2"},
        why="ChannelException code 2: the forwarded target refused, as a refused connection",
    ),
    # NoValidConnectionsError keeps one error per address tried, in a dict: read through it.
    Case(
        "paramiko: connection refused (NoValidConnectionsError's errors dict) is transient",
        _ssh("refused"),
        T.TRANSIENT,
        {"exception_type": "builtins.ConnectionRefusedError"},
        why="the refusal sits in a dict of per-address errors, not in __cause__",
    ),
    Case(
        "paramiko: a server that speaks no SSH (protocol banner) is transient",
        _ssh("garbage"),
        T.TRANSIENT,
        why="paramiko cannot tell a wrong port from an overloaded server dropping banners",
    ),
]


# --- FTP (ftplib) and SMTP (smtplib) reply codes --------------------------------------------------


def _ftp(scenario: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import ftplib

        def call() -> None:
            port = env.closed if scenario == "refused" else env.script(scenario)
            with ftplib.FTP(timeout=2) as ftp:
                ftp.connect("127.0.0.1", port)
                ftp.login("agent", "password")
                ftp.cwd("/reports/2031")
                ftp.mkd("/reports/2031")

        return call

    return calling(make)


def _smtp(scenario: str) -> Prepare:
    def make(env: FaultEnv) -> Call:
        import smtplib

        def call() -> None:
            port = env.closed if scenario == "refused" else env.script(scenario)
            with smtplib.SMTP("127.0.0.1", port, timeout=2) as smtp:
                if scenario == "smtp-auth-535":
                    smtp.login("agent", "password")
                smtp.sendmail("agent@fault.test", ["nobody@fault.test"], "Subject: x\r\n\r\nhi")

        return call

    return calling(make)


FTP_SMTP = [
    Case(
        "ftplib: 530 not logged in is auth_failure",
        _ftp("ftp-login-530"),
        T.AUTH_FAILURE,
        {"provider_code": "530", "signal": "provider_code", "retryable": False},
        why="the reply code that opens error_perm's message",
    ),
    Case(
        "ftplib: 550 no such directory is resource_missing",
        _ftp("ftp-missing-550"),
        T.RESOURCE_MISSING,
        {"provider_code": "550"},
        why="550 file unavailable",
    ),
    Case(
        "ftplib: 421 at the greeting (too many connections) is transient",
        _ftp("ftp-busy-421"),
        T.TRANSIENT,
        {"provider_code": "421"},
        why="error_temp: the server will take us later",
    ),
    Case(
        "ftplib: 452 insufficient storage is server_fault",
        _ftp("ftp-storage-452"),
        T.SERVER_FAULT,
        {"provider_code": "452"},
        why="the server's disk, not our request",
    ),
    Case(
        "smtplib: 535 authentication credentials invalid is auth_failure",
        _smtp("smtp-auth-535"),
        T.AUTH_FAILURE,
        {"provider_code": "535", "retryable": False},
        why="SMTPAuthenticationError.smtp_code",
    ),
    # SMTPRecipientsRefused keeps one (code, reply) per refused address, in a dict.
    Case(
        "smtplib: 550 for every recipient (SMTPRecipientsRefused) is resource_missing",
        _smtp("smtp-recipient-550"),
        T.RESOURCE_MISSING,
        {"provider_code": "550"},
        why="the codes sit in a dict of address -> (code, reply)",
    ),
    Case(
        "smtplib: 421 at the greeting (SMTPConnectError) is transient",
        _smtp("smtp-busy-421"),
        T.TRANSIENT,
        {"provider_code": "421"},
        why="the server closes for now",
    ),
    Case(
        "smtplib: 552 message too big (SMTPDataError) is invalid_input",
        _smtp("smtp-data-552"),
        T.INVALID_INPUT,
        {"provider_code": "552"},
        why="the message must change, not the timing",
    ),
    Case(
        "smtplib: 450 greylisted sender (SMTPSenderRefused) is transient",
        _smtp("smtp-greylisted-450"),
        T.TRANSIENT,
        {"provider_code": "450", "retryable": True},
        why="greylisting asks exactly for a later retry",
    ),
]
