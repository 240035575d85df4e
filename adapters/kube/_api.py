"""The one door to the Kubernetes API server: every HTTP call of this adapter goes through here.

It sends the raw JSON requests `_codec` builds through the official client's
`ApiClient` (so authentication, TLS, proxies and token refresh are the client's), and turns
every failure — HTTP status or transport — into a `core.errors.ClusterError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client import rest

from adapters.kube import _codec
from core import errors

log = logging.getLogger(__name__)

# Seconds to wait for a connection and for a non-watch answer.
CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 60.0
# Longest silence of a watch stream before it counts as dead. kube-apiserver sends every
# watcher that allows bookmarks one a minute, so a longer silence means a half-open
# connection (a peer that vanished without a FIN: a NAT or load balancer dropped the flow, a
# host died); the watch then resumes from its last resourceVersion at once instead of after
# the watch's own timeout (up to 5.5 minutes of missed events). client-go uses HTTP/2 pings.
WATCH_IDLE_TIMEOUT_S = 90.0


class KubeAPI:
    """Raw JSON over the official client's connection pool and credentials."""

    def __init__(
        self, api_client: client.ApiClient, *, watch_idle_timeout_s: float = WATCH_IDLE_TIMEOUT_S
    ) -> None:
        self._client = api_client
        self._watch_idle_timeout_s = watch_idle_timeout_s

    @property
    def host(self) -> str:
        return str(self._client.configuration.host)

    def close(self) -> None:
        self._client.close()  # type: ignore[no-untyped-call]

    def _send(self, request: _codec.Request, *, read_timeout_s: float) -> Any:
        headers = {"Accept": _codec.JSON, "Content-Type": request.content_type}
        data = request.encoded_body()
        try:
            method, url, header_params, _, post_params = self._client.param_serialize(
                method=request.method,
                resource_path=request.path,
                query_params=list(request.query),
                header_params=headers,
                auth_settings=["BearerToken"],
            )
            if data is not None:
                # NB: the client's REST layer would json.dumps any body it is given (its own
                # separators); the exact bytes matter (see `_codec.BodyEncoding`), so a body
                # goes through the client's connection pool as bytes.
                sent = self._client.rest_client.pool_manager.request(
                    method,
                    url,
                    body=data,
                    headers=header_params,
                    timeout=urllib3.Timeout(connect=CONNECT_TIMEOUT_S, read=read_timeout_s),
                    preload_content=False,
                )
                return rest.RESTResponse(sent)
            return self._client.call_api(
                method,
                url,
                header_params=header_params,
                post_params=post_params,
                _request_timeout=(CONNECT_TIMEOUT_S, read_timeout_s),
            )
        except (urllib3.exceptions.HTTPError, OSError, client.ApiException) as exc:
            raise errors.ClusterError(
                f"{request.describe()}: cannot reach the Kubernetes API server at {self.host}"
                f" ({exc}); check the kubeconfig / in-cluster service and network policy"
            ) from exc

    @staticmethod
    def _raise_for_status(request: _codec.Request, response: Any, body: bytes) -> None:
        status = int(response.status)
        if not 200 <= status <= 299:
            raise _codec.error_from_response(
                request, status=status, reason=str(response.reason or ""), body=body
            )

    def request_json(self, request: _codec.Request) -> dict[str, Any]:
        """Send and decode the answer; non-2xx raises the mapped ClusterError."""
        response = self._send(request, read_timeout_s=READ_TIMEOUT_S)
        try:
            body = bytes(response.read() or b"")
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise errors.ClusterError(
                f"{request.describe()}: reading the answer failed: {exc}"
            ) from exc
        self._raise_for_status(request, response, body)
        if not body:
            return {}
        try:
            return _codec.decode_object(body)
        except json.JSONDecodeError as exc:
            raise errors.ClusterError(f"{request.describe()}: answer is not JSON: {exc}") from exc

    def stream_lines(self, request: _codec.Request, *, timeout_s: float) -> Iterator[bytes]:
        """Lines of a streaming (watch) answer, as they arrive; closes the connection at the end.

        A stream silent for longer than the idle limit ends as if the server had ended it
        (see `WATCH_IDLE_TIMEOUT_S`): the caller resumes, nothing failed.
        """
        read_timeout_s = min(timeout_s + _codec.WATCH_READ_SLACK_S, self._watch_idle_timeout_s)
        response = self._send(request, read_timeout_s=read_timeout_s)
        raw: urllib3.BaseHTTPResponse = response.response
        try:
            if not 200 <= int(response.status) <= 299:
                self._raise_for_status(request, response, bytes(raw.read() or b""))
            pending = b""
            try:
                for chunk in raw.stream(amt=65536, decode_content=True):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    yield from lines
            except urllib3.exceptions.ReadTimeoutError:
                log.info("watch silent, resuming request=%s silent_s=%.0f",
                         request.describe(), read_timeout_s)
                return
            except (urllib3.exceptions.HTTPError, OSError) as exc:
                raise errors.ClusterError(
                    f"{request.describe()}: watch stream broke: {exc}"
                ) from exc
            if pending.strip():
                yield pending
        finally:
            # NB: close before release so a half-read stream never goes back to the pool.
            raw.close()
            raw.release_conn()
