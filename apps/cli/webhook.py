"""`computedomain webhook`: the optional admission webhook (Helm `webhook.enabled`).

Thin wiring: flags (with the env the chart sets), the driver config resolved exactly as the
controller and plugin resolve it, and a stdlib HTTPS server that hands every AdmissionReview
to `core.admission`. Every decision lives in the core; this module only speaks HTTP and TLS.
It validates the configs of both halves: compute-domain.nvidia.com against the IMEX mode, and
gpu.nvidia.com against the feature gates it is given (TimeSlicingSettings, PassthroughSupport),
which must therefore be the GPU plugin's gates (the chart passes the same `featureGates`).
A second path mutates: it gives claims whose GpuConfig carries a fabricTopologyConfig the
constraints the scheduler needs (`core.admission.mutate`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import http.server
import json
import logging
import os
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from apps.shell import flags, logs, signals
from core import admission, errors, models
from core.computedomain import modes

log = logging.getLogger(__name__)

DEFAULT_PORT: Final = 8443
HEALTH_PATH: Final = "/healthz"
# An AdmissionReview carries the object (etcd caps objects near 1.5 MiB) and maybe its old copy.
MAX_BODY_BYTES: Final = 8 * 1024 * 1024
CONNECTION_TIMEOUT_S: Final = 30.0
# Which core function answers the AdmissionReviews posted to each path.
_ANSWERS: Final[Mapping[str, Callable[..., dict[str, Any]]]] = {
    admission.VALIDATE_PATH: admission.review_document,
    admission.MUTATE_PATH: admission.mutate_document,
}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    address: str
    port: int
    tls_cert_file: str
    tls_key_file: str
    namespace: str
    feature_gates: str
    imex_mode: str
    imex_isolation: str

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert_file)


COMMAND = flags.command(
    "computedomain webhook",
    help="Serve the admission webhook that rejects invalid ComputeDomain and GPU claim "
    "configs. Every flag falls back to the environment variable named beside it (the Helm "
    "chart sets those).",
    params=[
        flags.option("--address", env="WEBHOOK_ADDRESS", default="0.0.0.0",
                     help="listen address"),
        # NB: text, not a port type: settings_from names the Helm value in its message.
        flags.option("--port", env="WEBHOOK_PORT", default=str(DEFAULT_PORT),
                     help="listen port (Helm webhook.port)"),
        flags.option("--tls-cert-file", env="TLS_CERT_FILE", default="",
                     help="PEM serving certificate (empty: plain HTTP, for tests only)"),
        flags.option("--tls-key-file", env="TLS_KEY_FILE", default="",
                     help="PEM private key of the serving certificate"),
        flags.namespace(),
        flags.feature_gates(),
        flags.imex_mode(),
        flags.imex_isolation(),
        flags.verbosity(),
    ],
)


def parse(argv: Sequence[str] | None, env: Mapping[str, str]) -> argparse.Namespace:
    return flags.parse_namespace(COMMAND, argv, env)


def main(argv: Sequence[str], *, env: Mapping[str, str], verbosity: int | None = None) -> int:
    args = parse(argv, env)
    # NB: a server's log lines are its output: its own verbosity, not the CLI tools' default.
    logs.configure(args.log_verbosity if verbosity is None else verbosity)
    return run(args, env=env)


def settings_from(args: argparse.Namespace, *, env: Mapping[str, str]) -> Settings:
    """The parsed flags (each already fell back to its env var), checked. Raises ConfigError."""
    del env  # resolved by the flags; kept for callers that pass it
    raw_port = str(args.port).strip()
    try:
        port = int(raw_port)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise errors.ConfigError(
            f"webhook port {raw_port!r} is not a port number: set WEBHOOK_PORT (Helm "
            "webhook.port) or --port to a number from 1 to 65535"
        )
    cert, key = args.tls_cert_file, args.tls_key_file
    if bool(cert) != bool(key):
        raise errors.ConfigError(
            "TLS needs both a certificate and its key: set both TLS_CERT_FILE and TLS_KEY_FILE "
            "(--tls-cert-file/--tls-key-file), or neither for plain HTTP in tests"
        )
    return Settings(
        address=args.address,
        port=port,
        tls_cert_file=cert,
        tls_key_file=key,
        namespace=args.namespace,
        feature_gates=args.feature_gates,
        imex_mode=args.imex_mode,
        imex_isolation=args.imex_isolation,
    )


def run(args: argparse.Namespace, *, env: Mapping[str, str]) -> int:
    try:
        settings = settings_from(args, env=env)
        resolved = modes.resolve_driver_config(
            mode=settings.imex_mode,
            isolation=settings.imex_isolation,
            feature_gates=settings.feature_gates,
            namespace=settings.namespace,
        )
        tls = _load_tls(settings) if settings.tls else None
        server = _listen(settings, config=resolved.config, tls=tls)
    except errors.ConfigError as exc:
        log.error("event=startup_failed error=%r", exc.message)
        print(f"error: {exc.message}", file=sys.stderr)
        return 2

    for note in resolved.notes:
        log.info("event=config_note note=%r", note)
    log.info("event=config %s", modes.describe(resolved.config))
    if tls is None:
        log.warning(
            "event=plain_http reason=%r",
            "no TLS_CERT_FILE/TLS_KEY_FILE: serving plain HTTP, for tests only; the API server "
            "calls admission webhooks over HTTPS",
        )
    # NB: handlers go in before "listening" is logged: whoever waits for that line may
    # signal us right away.
    stop = signals.stop_on_signals(log)
    host, port = server.server_address[:2]
    log.info(
        "event=listening address=%s port=%d tls=%s path=%s mutate_path=%s",
        host, port, str(tls is not None).lower(), admission.VALIDATE_PATH, admission.MUTATE_PATH,
    )
    serving = threading.Thread(target=server.serve_forever, name="webhook", daemon=True)
    serving.start()
    stop.wait()
    server.shutdown()
    server.server_close()
    serving.join()
    log.info("event=stopped")
    return 0


def _load_tls(settings: Settings) -> _ReloadingTLS:
    try:
        return _ReloadingTLS(settings.tls_cert_file, settings.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise errors.ConfigError(
            f"cannot load the TLS key pair TLS_CERT_FILE={settings.tls_cert_file} "
            f"TLS_KEY_FILE={settings.tls_key_file}: {exc}; check the Secret named by Helm "
            "webhook.tls.secretName (a kubernetes.io/tls Secret with tls.crt and tls.key)"
        ) from exc


def _listen(
    settings: Settings, *, config: models.DriverConfig, tls: _ReloadingTLS | None
) -> _WebhookServer:
    try:
        return _WebhookServer((settings.address, settings.port), config=config, tls=tls)
    except OSError as exc:
        raise errors.ConfigError(
            f"cannot listen on {settings.address}:{settings.port}: {exc}; choose another "
            "port with WEBHOOK_PORT (Helm webhook.port) or --port"
        ) from exc


class _ReloadingTLS:
    """A server TLS context that reloads the key pair when its files change (cert rotation)."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self._files = (cert_file, key_file)
        self._lock = threading.Lock()
        self._stamp = self._read_stamp()
        self._context = self._load()

    def context(self) -> ssl.SSLContext:
        stamp = self._read_stamp()
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._context = self._load()
                    self._stamp = stamp
                    log.info("event=tls_reloaded cert=%s", self._files[0])
                except (OSError, ssl.SSLError) as exc:
                    # NB: mid-rotation the cert and key may not match yet; keep the old pair.
                    log.warning("event=tls_reload_failed error=%r", str(exc))
            return self._context

    def _read_stamp(self) -> tuple[tuple[int, int], ...]:
        stamps: list[tuple[int, int]] = []
        for path in self._files:
            try:
                st = os.stat(path)
                stamps.append((st.st_mtime_ns, st.st_size))
            except OSError:
                stamps.append((0, 0))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(certfile=self._files[0], keyfile=self._files[1])
        return context


class _WebhookServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        config: models.DriverConfig,
        tls: _ReloadingTLS | None,
    ) -> None:
        self.config = config
        self.tls = tls
        super().__init__(address, _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The TLS handshake runs here, in the connection's own thread, so a slow or silent
        # client cannot stall the accept loop.
        if self.tls is not None:
            request.settimeout(CONNECTION_TIMEOUT_S)
            try:
                request = self.tls.context().wrap_socket(request, server_side=True)
            except (OSError, ssl.SSLError) as exc:
                log.info("event=tls_handshake_failed client=%s error=%r", client_address, str(exc))
                _close_quietly(request)
                return
        super().finish_request(request, client_address)


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _WebhookServer
    protocol_version = "HTTP/1.1"
    timeout = CONNECTION_TIMEOUT_S

    def do_GET(self) -> None:
        if self._path() == HEALTH_PATH:
            self._reply(200, b"ok\n", content_type="text/plain; charset=utf-8")
        else:
            self._reply(404, b"not found\n", content_type="text/plain; charset=utf-8")

    def do_POST(self) -> None:
        answer = _ANSWERS.get(self._path())
        if answer is None:
            self._reply(404, b"not found\n", content_type="text/plain; charset=utf-8")
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._reply(411, b"Content-Length required\n", content_type="text/plain")
            return
        if not 0 <= length <= MAX_BODY_BYTES:
            self._reply(413, b"request body too large\n", content_type="text/plain")
            return
        body = self.rfile.read(length)
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            self._reply(400, b"the body is not JSON\n", content_type="text/plain")
            return
        reply = answer(document, config=self.server.config)
        _log_outcome(document, reply["response"])
        self._reply(200, json.dumps(reply).encode(), content_type="application/json")

    def _path(self) -> str:
        return self.path.split("?", 1)[0]

    def _reply(self, code: int, body: bytes, *, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("event=http_request client=%s %s", self.address_string(), format % args)


def _log_outcome(document: object, response: Mapping[str, Any]) -> None:
    """One key=value line per denial; allowed requests only at debug level."""
    request: Any = document.get("request") if isinstance(document, Mapping) else None
    request = request if isinstance(request, Mapping) else {}
    kind = request.get("kind")
    kind_name = kind.get("kind", "") if isinstance(kind, Mapping) else ""
    fields = (
        f"uid={response.get('uid', '')} kind={kind_name} "
        f"namespace={request.get('namespace', '')} name={request.get('name', '')} "
        f"operation={request.get('operation', '')}"
    )
    if response.get("patch"):
        log.info("event=admission_mutated %s patch_type=%s", fields, response.get("patchType"))
        return
    if response.get("allowed"):
        log.debug("event=admission_allowed %s", fields)
        return
    status = response.get("status") or {}
    log.info(
        "event=admission_denied %s code=%s message=%r",
        fields, status.get("code", ""), status.get("message", ""),
    )
