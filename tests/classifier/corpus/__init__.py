"""The corpus: real exceptions raised by real client libraries calling local fault servers
(HTTP statuses, provider bodies, rate-limit headers, slow and dropped responses; TLS servers with
bad certificates; scripted SMTP and FTP servers; an SSH server; AWS services' own error codes),
the machine's PostgreSQL, MariaDB and RabbitMQ, and refused ports, each with the category (and
evidence) the classifier must find, and a one-line reason where the category is not obvious.

Each case prepares what exists before the failure (a client, a session, a pool, an event loop)
and yields the failing call. The corpus test (test_corpus.py) makes the call once and checks
what `classify` says; the classify benchmark (benchmarks/classify.py) times the same call as
the failure path an agent pays before `classify` runs. The cases live in one module per family.
"""

from __future__ import annotations

from tests.classifier.corpus.apis import BOTOCORE, CLOUD, GRPC, LLM_SDKS
from tests.classifier.corpus.cases import (
    BUILTINS,
    LIBRARY,
    WRAPPED,
    Call,
    Case,
    caught,
    service_available,
)
from tests.classifier.corpus.databases import DATA_STORES, MYSQL, POSTGRESQL
from tests.classifier.corpus.delays import DELAYS
from tests.classifier.corpus.handshakes import (
    CONNECT_TIMEOUTS,
    FTP_PERMISSIONS,
    TLS_CLIENT_CERTS,
    WEBSOCKETS,
)
from tests.classifier.corpus.http_clients import AIOHTTP, HTTPX, REQUESTS, URLLIB
from tests.classifier.corpus.others import AGENT_WRAPPERS, CONTAINERS, OTHERS
from tests.classifier.corpus.protocols import BROKERS, FTP_SMTP, SSH
from tests.classifier.corpus.tls import TLS

__all__ = [
    "BUILTINS",
    "CORPUS",
    "LIBRARY",
    "SECTIONS",
    "WRAPPED",
    "Call",
    "Case",
    "caught",
    "service_available",
]

SECTIONS = {
    "requests": REQUESTS,
    "httpx": HTTPX,
    "aiohttp": AIOHTTP,
    "urllib": URLLIB,
    "botocore": BOTOCORE,
    "LLM SDKs": LLM_SDKS,
    "gRPC": GRPC,
    "data stores": DATA_STORES,
    "others": OTHERS,
    "TLS": TLS,
    "PostgreSQL": POSTGRESQL,
    "MySQL": MYSQL,
    "brokers": BROKERS,
    "SSH": SSH,
    "FTP and SMTP": FTP_SMTP,
    "cloud codes": CLOUD,
    "containers": CONTAINERS,
    "agent wrappers": AGENT_WRAPPERS,
    "delays beyond Retry-After": DELAYS,
    "WebSocket handshakes": WEBSOCKETS,
    "connect timeouts": CONNECT_TIMEOUTS,
    "FTP permissions": FTP_PERMISSIONS,
    "TLS client certificates": TLS_CLIENT_CERTS,
}
CORPUS = [case for cases in SECTIONS.values() for case in cases]
