"""Fault servers beside HTTP, on 127.0.0.1, for the corpus's protocol families: TLS servers with
throw-away certificates (an untrusted self-signed one, one for another host name, one that
demands a client certificate), scripted SMTP and FTP servers that answer each command with a
chosen reply, an SSH server (paramiko's, in process) that refuses passwords and channels, and a
private PostgreSQL cluster with password authentication (the machine's trusts everyone).

Each is a context manager that yields where it listens and stops everything it started; every
socket wait is bounded. `faults.FaultEnv` starts them on first use.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path

# How long a fault server waits on a client before it gives up on it.
CLIENT_WAIT_S = 3.0
# How often a server loop checks whether it should stop (shutdown waits up to this long).
POLL_S = 0.05

# --- TLS ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificates:
    """Throw-away self-signed certificates: `good` names 127.0.0.1 and localhost, `other` only
    elsewhere.test (a certificate for another host)."""

    good: tuple[Path, Path]  # (certificate, key)
    other: tuple[Path, Path]


def _self_signed(folder: Path, name: str, alt_names: list) -> tuple[Path, Path]:
    """Write a self-signed certificate and its key for `alt_names`; return their paths."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / f"{name}.pem", folder / f"{name}.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


@contextmanager
def certificates() -> Iterator[Certificates]:
    """Yield fresh certificates in a temporary folder, removed afterwards."""
    from cryptography import x509

    with tempfile.TemporaryDirectory(prefix="failsight-tls-") as folder:
        local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        yield Certificates(
            good=_self_signed(Path(folder), "good", local),
            other=_self_signed(Path(folder), "other", [x509.DNSName("elsewhere.test")]),
        )


def server_context(
    cert: tuple[Path, Path],
    client_ca: Path | None = None,
    maximum_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
) -> ssl.SSLContext:
    """A server's TLS context with `cert`, demanding a client certificate issued by `client_ca`."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*cert)
    context.maximum_version = maximum_version
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(client_ca)
    return context


class TLSFaultServer(ThreadingHTTPServer):
    """The HTTP fault server behind TLS; the handshake runs in the request's thread."""

    daemon_threads = True

    def __init__(self, handler: type, context: ssl.SSLContext) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.context = context

    def finish_request(self, request: socket.socket, client_address: object) -> None:
        request.settimeout(CLIENT_WAIT_S)
        secure = self.context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        try:
            secure.do_handshake()
        except (ssl.SSLError, OSError):
            _drain(secure)  # let the alert reach the client before the socket closes
            secure.close()
            return
        super().finish_request(secure, client_address)

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that refused our certificate is the scenario working


def _drain(sock: socket.socket) -> None:
    """Read what the client still sends until it closes (bounded), so that closing the socket
    does not reset the connection and destroy the TLS alert the client has not read yet."""
    try:
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(4096):
            pass
    except OSError:
        pass


@contextmanager
def tls_server(
    handler: type,
    cert: tuple[Path, Path],
    client_ca: Path | None = None,
    maximum_version: ssl.TLSVersion = ssl.TLSVersion.MAXIMUM_SUPPORTED,
) -> Iterator[str]:
    """Yield the https:// base URL of `handler` behind TLS with `cert`; with `client_ca`, the
    server demands a client certificate issued by it (in the handshake up to TLS 1.2, with an
    alert after it in TLS 1.3)."""
    server = TLSFaultServer(handler, server_context(cert, client_ca, maximum_version))
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --- SMTP and FTP: scripted line servers --------------------------------------------------------


@dataclass(frozen=True)
class Script:
    """A line protocol's answers: the greeting, then one reply per command verb ("*" for any
    other); after a reply starting "354" the server reads message data up to "." and answers
    with the reply for ".". With `hang_up`, the server closes after the greeting."""

    greeting: str
    replies: dict[str, str]
    hang_up: bool = False


SMTP_SCRIPTS = {
    "smtp-auth-535": Script(
        "220 fault.test ESMTP",
        {
            "EHLO": "250-fault.test\r\n250 AUTH PLAIN LOGIN",
            "AUTH": "535 5.7.8 Authentication credentials invalid",
            "*": "250 OK",
        },
    ),
    "smtp-recipient-550": Script(
        "220 fault.test ESMTP",
        {
            "EHLO": "250 fault.test",
            "RCPT": "550 5.1.1 <nobody@fault.test>: Recipient address rejected: User unknown",
            "*": "250 OK",
        },
    ),
    "smtp-busy-421": Script(
        "421 4.3.2 fault.test Service not available, closing channel", {}, hang_up=True
    ),
    "smtp-data-552": Script(
        "220 fault.test ESMTP",
        {
            "EHLO": "250 fault.test",
            "DATA": "354 End data with <CR><LF>.<CR><LF>",
            ".": "552 5.3.4 Message size exceeds fixed maximum message size",
            "*": "250 OK",
        },
    ),
    "smtp-greylisted-450": Script(
        "220 fault.test ESMTP",
        {
            "EHLO": "250 fault.test",
            "MAIL": "450 4.7.1 Greylisted, please try again later",
            "*": "250 OK",
        },
    ),
}
FTP_SCRIPTS = {
    "ftp-login-530": Script(
        "220 fault.test FTP",
        {"USER": "331 Password required", "PASS": "530 Login incorrect.", "*": "500 ?"},
    ),
    "ftp-missing-550": Script(
        "220 fault.test FTP",
        {
            "USER": "331 Password required",
            "PASS": "230 Logged in.",
            "CWD": "550 /reports/2031: No such file or directory.",
            "*": "200 OK",
        },
    ),
    "ftp-busy-421": Script("421 Too many connections, try again later.", {}, hang_up=True),
    "ftp-storage-452": Script(
        "220 fault.test FTP",
        {
            "USER": "331 Password required",
            "PASS": "230 Logged in.",
            "MKD": "452 Insufficient storage space.",
            "*": "200 OK",
        },
    ),
}


class ScriptHandler(socketserver.StreamRequestHandler):
    """Speaks one Script: greet, then answer each command line until QUIT or the client leaves."""

    script: Script  # set on each server's own subclass

    def handle(self) -> None:
        self.request.settimeout(CLIENT_WAIT_S)
        try:
            self._say(self.script.greeting)
            if self.script.hang_up:
                _drain(self.request)
                return
            self._converse()
        except OSError:
            pass

    def _converse(self) -> None:
        while line := self.rfile.readline(1024):
            verb = line.decode("latin-1").split(" ", 1)[0].strip().upper()
            if verb == "QUIT":
                self._say("221 Bye")
                return
            reply = self.script.replies.get(verb, self.script.replies.get("*", "250 OK"))
            self._say(reply)
            if reply.startswith("354"):
                while (data := self.rfile.readline(65536)) and data.rstrip(b"\r\n") != b".":
                    pass
                self._say(self.script.replies.get(".", "250 OK"))

    def _say(self, reply: str) -> None:
        self.wfile.write(reply.encode() + b"\r\n")
        self.wfile.flush()


class ScriptServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


@contextmanager
def script_server(script: Script) -> Iterator[int]:
    """Yield the port of a server speaking `script` on 127.0.0.1."""
    with serving(type("Handler", (ScriptHandler,), {"script": script})) as port:
        yield port


@contextmanager
def serving(handler: type[socketserver.BaseRequestHandler]) -> Iterator[int]:
    """Yield the port of a threaded server on 127.0.0.1 whose connections `handler` answers."""
    server = ScriptServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def garbage_server() -> Iterator[int]:
    """Yield the port of a server that answers anything with an HTTP error (a wrong port)."""
    script = Script("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n", {}, hang_up=True)
    with script_server(script) as port:
        yield port


class CutShortHandler(socketserver.StreamRequestHandler):
    """Reads a whole HTTP request, answers the first lines of a 101 and hangs up mid-headers."""

    def handle(self) -> None:
        self.request.settimeout(CLIENT_WAIT_S)
        try:
            while (line := self.rfile.readline(65536)) and line not in (b"\r\n", b"\n"):
                pass
            self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n")
            self.wfile.flush()
            _drain(self.request)
        except OSError:
            pass


@contextmanager
def cut_short_server() -> Iterator[int]:
    """Yield the port of a server whose handshake answer ends before its headers do: the
    request is read first, so the client always meets the hang-up while it reads the answer."""
    with serving(CutShortHandler) as port:
        yield port


# --- SSH ------------------------------------------------------------------------------------------

SSH_USER, SSH_PASSWORD = "agent", "right-password"


@dataclass(frozen=True)
class SSHServer:
    """Where the in-process SSH server listens, and its host key (as a paramiko PKey)."""

    port: int
    host_key: object


@contextmanager
def ssh_server() -> Iterator[SSHServer]:
    """Yield an SSH server that accepts SSH_USER/SSH_PASSWORD only, refuses every session
    channel (administratively prohibited) and every forwarded connection (connect failed)."""
    import paramiko

    class Interface(paramiko.ServerInterface):
        def get_allowed_auths(self, username: str) -> str:
            return "password"

        def check_auth_password(self, username: str, password: str) -> int:
            if (username, password) == (SSH_USER, SSH_PASSWORD):
                return paramiko.AUTH_SUCCESSFUL
            return paramiko.AUTH_FAILED

        def check_channel_request(self, kind: str, chanid: int) -> int:
            return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

        def check_channel_direct_tcpip_request(
            self, chanid: int, origin: tuple, destination: tuple
        ) -> int:
            return paramiko.OPEN_FAILED_CONNECT_FAILED

    host_key = paramiko.ECDSAKey.generate()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(client)
            transport.add_server_key(host_key)
            transports.append(transport)
            try:
                transport.start_server(server=Interface())
            except (paramiko.SSHException, EOFError, OSError):
                transport.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield SSHServer(listener.getsockname()[1], host_key)
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept() that close() would not
        listener.close()
        for transport in transports:
            transport.close()
        thread.join(timeout=CLIENT_WAIT_S)


# --- a private PostgreSQL cluster with password authentication ---------------------------------

PG_USER, PG_PASSWORD = "postgres", "cluster-password"


def postgres_binaries() -> Path | None:
    """Return the folder of PostgreSQL's initdb and pg_ctl on this machine, if there is one."""
    for folder in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            return folder
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _as_postgres(args: list[str]) -> list[str]:
    """Return `args` run as the postgres OS user when we are root (initdb refuses root)."""
    if os.geteuid() != 0:
        return args
    return ["runuser", "-u", "postgres", "--", *args]


@contextmanager
def private_postgres() -> Iterator[int]:
    """Yield the port of a fresh PostgreSQL cluster on 127.0.0.1 that checks passwords
    (scram-sha-256, superuser PG_USER with PG_PASSWORD); stop and remove it afterwards."""
    binaries = postgres_binaries()
    if binaries is None:
        raise RuntimeError("PostgreSQL's initdb is not installed")
    folder = Path(tempfile.mkdtemp(prefix="failsight-pg-"))
    data = folder / "data"
    password_file = folder / "password"
    password_file.write_text(PG_PASSWORD + "\n")
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
        shutil.chown(password_file, "postgres")
    port = _free_port()
    pg_ctl = str(binaries / "pg_ctl")
    try:
        subprocess.run(
            _as_postgres(
                [
                    *(str(binaries / "initdb"), "-D", str(data), "-U", PG_USER),
                    *("-A", "scram-sha-256", "--pwfile", str(password_file), "--no-sync"),
                ]
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run(
            # -l: the server must not inherit our pipes, or waiting for pg_ctl never ends
            _as_postgres(
                [
                    pg_ctl,
                    "-D",
                    str(data),
                    "-l",
                    str(folder / "log"),
                    "-o",
                    options,
                    "-w",
                    "-t",
                    "60",
                    "start",
                ]
            ),
            check=True,
            capture_output=True,
            timeout=90,
        )
        yield port
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
            timeout=60,
        )
        shutil.rmtree(folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int) -> bool:
    """Return whether something accepts TCP connections on 127.0.0.1:`port` (within 1 s)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False
