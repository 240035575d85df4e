"""`computedomain webhook` as a real process: real AdmissionReviews over HTTP and HTTPS."""

from __future__ import annotations

import collections.abc
import http.client
import json
import os
import pathlib
import queue
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from core import names

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
PATH = "/validate-resource-claim-parameters"
HOST_MANAGED_ENV = {
    "IMEX_MODE": "hostManaged", "IMEX_ISOLATION": "none",
    "FEATURE_GATES": "HostManagedIMEXDaemon=true",
}
_OWN_ENV = ("WEBHOOK_PORT", "WEBHOOK_ADDRESS", "TLS_CERT_FILE", "TLS_KEY_FILE", "IMEX_MODE",
            "IMEX_ISOLATION", "FEATURE_GATES", "NAMESPACE")


class Webhook:
    """A running webhook subprocess, its port and every stderr line it wrote."""

    def __init__(self, *args: str, env: dict[str, str], tls_ca: pathlib.Path | None = None):
        base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "apps.cli", "webhook", "--address", "127.0.0.1",
             "--port", "0", *args],
            cwd=REPO_ROOT, env={**base, **env},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()
        self.tls_ca = tls_ca
        self.port = int(self.wait_for(r"event=listening .*port=(\d+)").group(1))

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        for line in list(self.lines):
            found = re.search(pattern, line)
            if found:
                return found
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                pending = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if pending is None:
                break
            found = re.search(pattern, pending)
            if found:
                return found
        raise AssertionError(f"no log line matches {pattern!r}; stderr:\n{''.join(self.lines)}")

    def connection(self) -> http.client.HTTPConnection:
        if self.tls_ca is None:
            return http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        context = ssl.create_default_context(cafile=str(self.tls_ca))
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=10, context=context)

    def call(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        conn = self.connection()
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            reply = conn.getresponse()
            return reply.status, reply.read()
        finally:
            conn.close()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        document = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                    "request": request}
        status, body = self.call("POST", PATH, json.dumps(document).encode())
        assert status == 200, body
        reply: dict[str, Any] = json.loads(body)
        assert reply["apiVersion"] == "admission.k8s.io/v1"
        assert reply["kind"] == "AdmissionReview"
        response: dict[str, Any] = reply["response"]
        return response

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@pytest.fixture
def start() -> collections.abc.Iterator[collections.abc.Callable[..., Webhook]]:
    started: list[Webhook] = []

    def _start(*args: str, env: dict[str, str] | None = None,
               tls_ca: pathlib.Path | None = None) -> Webhook:
        hook = Webhook(*args, env=env or {}, tls_ca=tls_ca)
        started.append(hook)
        return hook

    yield _start
    for hook in started:
        hook.stop()


def channel_claim(uid: str, **params: Any) -> dict[str, Any]:
    parameters = {"apiVersion": names.GROUP_VERSION, "kind": names.KIND_CHANNEL_CONFIG,
                  "domainID": "cd-uid-1", **params}
    return {
        "uid": uid,
        "kind": {"group": "resource.k8s.io", "version": "v1", "kind": "ResourceClaim"},
        "resource": {"group": "resource.k8s.io", "version": "v1", "resource": "resourceclaims"},
        "namespace": "ml",
        "name": "train",
        "operation": "CREATE",
        "object": {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train", "namespace": "ml"},
            "spec": {"devices": {
                "requests": [{"name": "channel",
                              "exactly": {"deviceClassName": names.CHANNEL_DEVICE_CLASS}}],
                "config": [{"requests": ["channel"],
                            "opaque": {"driver": names.DRIVER_NAME, "parameters": parameters}}],
            }},
        },
    }


def channel_template(uid: str, **params: Any) -> dict[str, Any]:
    request = channel_claim(uid, **params)
    claim = request["object"]
    request["kind"]["kind"] = "ResourceClaimTemplate"
    request["resource"]["resource"] = "resourceclaimtemplates"
    request["object"] = {**claim, "kind": "ResourceClaimTemplate", "spec": {"spec": claim["spec"]}}
    return request


# ---------------------------------------------------------------- plain HTTP


def test_webhook_serves_health_and_admits_a_valid_claim_over_plain_http(start: Any) -> None:
    hook = start()
    hook.wait_for(r"event=plain_http .*for tests only")
    assert hook.call("GET", "/healthz") == (200, b"ok\n")
    assert hook.review(channel_claim("uid-ok")) == {"uid": "uid-ok", "allowed": True}


def test_webhook_denies_an_unknown_field_and_logs_one_line_for_the_denial(start: Any) -> None:
    hook = start()
    response = hook.review(channel_claim("uid-typo", domainId="x"))
    assert response["allowed"] is False
    assert response["uid"] == "uid-typo"
    assert response["status"]["code"] == 422
    assert "spec.devices.config[0].opaque.parameters.domainId" in response["status"]["message"]
    line = hook.wait_for(r"event=admission_denied uid=uid-typo .*").group(0)
    assert "kind=ResourceClaim namespace=ml name=train operation=CREATE code=422" in line
    assert sum("admission_denied" in x for x in hook.lines) == 1


def test_webhook_in_host_managed_mode_from_env_denies_all_and_daemon_configs(start: Any) -> None:
    hook = start(env=HOST_MANAGED_ENV)
    hook.wait_for(r"event=config mode=hostManaged isolation=none")
    denied = hook.review(channel_template("uid-all", allocationMode="All"))
    assert denied["allowed"] is False
    message = denied["status"]["message"]
    assert "spec.spec.devices.config[0].opaque.parameters.allocationMode" in message
    assert "channel 0 only" in message
    daemon = channel_claim("uid-daemon")
    daemon["object"]["spec"]["devices"]["config"][0]["opaque"]["parameters"] = {
        "apiVersion": names.GROUP_VERSION, "kind": names.KIND_DAEMON_CONFIG, "domainID": "d"}
    assert hook.review(daemon)["allowed"] is False
    assert hook.review(channel_claim("uid-single", allocationMode="Single"))["allowed"] is True


def test_webhook_flags_override_env(start: Any) -> None:
    # NB: the gate goes too: HostManagedIMEXDaemon=true with mode driverManaged is refused.
    hook = start("--imex-mode", "driverManaged", "--imex-isolation", "", "--feature-gates", "",
                 env=HOST_MANAGED_ENV)
    hook.wait_for(r"event=config mode=driverManaged")
    assert hook.review(channel_claim("uid-all", allocationMode="All"))["allowed"] is True


def test_webhook_answers_http_errors_for_wrong_paths_and_bodies(start: Any) -> None:
    hook = start()
    assert hook.call("POST", "/mutate", b"{}")[0] == 404
    assert hook.call("GET", "/other")[0] == 404
    assert hook.call("POST", PATH, b"{not json")[0] == 400
    status, body = hook.call("POST", PATH, b'{"kind": "AdmissionReview"}')
    assert status == 200
    assert json.loads(body)["response"]["allowed"] is False
    # Still serving after all of that.
    assert hook.call("GET", "/healthz")[0] == 200


def test_webhook_shuts_down_cleanly_on_sigterm(start: Any) -> None:
    hook = start()
    assert hook.stop() == 0
    hook.wait_for(r"event=shutdown signal=SIGTERM")
    hook.wait_for(r"event=stopped")


def test_webhook_refuses_to_start_with_an_invalid_mode_configuration() -> None:
    base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "webhook", "--port", "0"],
        cwd=REPO_ROOT, env={**base, "IMEX_MODE": "hostManaged", "IMEX_ISOLATION": "none"},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "HostManagedIMEXDaemon=true" in done.stderr


def test_webhook_refuses_a_certificate_without_its_key(tmp_path: pathlib.Path) -> None:
    base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "webhook", "--port", "0"],
        cwd=REPO_ROOT, env={**base, "TLS_CERT_FILE": str(tmp_path / "tls.crt")},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "TLS_KEY_FILE" in done.stderr


def test_webhook_refuses_to_start_when_the_key_pair_cannot_be_read(
    tmp_path: pathlib.Path,
) -> None:
    base = {k: v for k, v in os.environ.items() if k not in _OWN_ENV}
    done = subprocess.run(
        [sys.executable, "-m", "apps.cli", "webhook", "--port", "0",
         "--tls-cert-file", str(tmp_path / "tls.crt"), "--tls-key-file", str(tmp_path / "tls.key")],
        cwd=REPO_ROOT, env=base, capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "cannot load the TLS key pair" in done.stderr
    assert "webhook.tls.secretName" in done.stderr


# ---------------------------------------------------------------- TLS


def _self_signed(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    # NB: `cryptography` is not in the environment; the openssl CLI makes the test pair.
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("TLS run skipped: neither the `cryptography` package nor an openssl CLI")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )
    return cert, key


def test_webhook_serves_admission_reviews_over_tls_with_the_given_certificate(
    start: Any, tmp_path: pathlib.Path
) -> None:
    cert, key = _self_signed(tmp_path)
    hook = start(env={"TLS_CERT_FILE": str(cert), "TLS_KEY_FILE": str(key), **HOST_MANAGED_ENV},
                 tls_ca=cert)
    hook.wait_for(r"event=listening .*tls=true path=/validate-resource-claim-parameters")
    assert not any("plain_http" in line for line in hook.lines)
    assert hook.call("GET", "/healthz") == (200, b"ok\n")
    assert hook.review(channel_claim("uid-tls"))["allowed"] is True
    denied = hook.review(channel_claim("uid-tls-all", allocationMode="All"))
    assert denied["allowed"] is False
    # A plain-HTTP client gets no admission answer from the TLS port.
    plain = http.client.HTTPConnection("127.0.0.1", hook.port, timeout=10)
    with pytest.raises((http.client.HTTPException, OSError)):
        plain.request("GET", "/healthz")
        plain.getresponse().read()
    plain.close()
    assert hook.call("GET", "/healthz")[0] == 200


def test_webhook_picks_up_a_rotated_certificate_without_a_restart(
    start: Any, tmp_path: pathlib.Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    cert, key = _self_signed(first)
    new_cert, new_key = _self_signed(second)
    hook = start(env={"TLS_CERT_FILE": str(cert), "TLS_KEY_FILE": str(key)}, tls_ca=cert)
    assert hook.call("GET", "/healthz")[0] == 200
    # What cert-manager does to the mounted Secret: new key pair, same paths.
    key.write_bytes(new_key.read_bytes())
    cert.write_bytes(new_cert.read_bytes())
    hook.tls_ca = new_cert
    assert hook.review(channel_claim("uid-rotated"))["allowed"] is True
    hook.wait_for(r"event=tls_reloaded")
