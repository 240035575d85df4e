"""`KubeCluster`: the `core.ports.Cluster` port on a real Kubernetes API server.

Kinds are routed through `core.kinds`; requests are built by `_codec` and sent by `_api`
(the one door to the network), so this class only wires the two together.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from kubernetes import client, config

from adapters.kube import _api, _codec
from core import errors, kinds, mergepatch, models, ports

log = logging.getLogger(__name__)

DEFAULT_COMPONENT = "compute-domain-driver"
# Enough for the controller's 16 workers plus its 6 informer watches.
POOL_CONNECTIONS = 32


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class KubeCluster:
    """Cluster operations on JSON objects through the official `kubernetes` client."""

    def __init__(
        self,
        api: _api.KubeAPI,
        *,
        component: str = DEFAULT_COMPONENT,
        event_namespace: str = "default",
        wall_clock: Callable[[], datetime.datetime] = _utc_now,
    ) -> None:
        self._api = api
        self._component = component
        self._event_namespace = event_namespace
        self._wall_clock = wall_clock
        self._events_lock = threading.Lock()
        self._events: collections.OrderedDict[_EventKey, _RecordedEvent] = (
            collections.OrderedDict()
        )

    @classmethod
    def from_config(
        cls,
        kubeconfig: str | None,
        *,
        component: str = DEFAULT_COMPONENT,
        event_namespace: str = "default",
        environ: Mapping[str, str] | None = None,
        watch_idle_timeout_s: float = _api.WATCH_IDLE_TIMEOUT_S,
    ) -> KubeCluster:
        """In-cluster credentials when `kubeconfig` is None inside a pod, else a kubeconfig file.

        Inside a pod means KUBERNETES_SERVICE_HOST is set. Outside one, None falls back to
        the client's default (`$KUBECONFIG` or `~/.kube/config`). A watch silent for
        `watch_idle_timeout_s` counts as dead and resumes (see `_api.WATCH_IDLE_TIMEOUT_S`).
        """
        env = os.environ if environ is None else environ
        configuration = client.Configuration()
        try:
            if kubeconfig is None and env.get("KUBERNETES_SERVICE_HOST"):
                config.load_incluster_config(  # type: ignore[no-untyped-call]
                    client_configuration=configuration
                )
            else:
                config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, client_configuration=configuration
                )
        except (config.ConfigException, OSError) as exc:
            where = kubeconfig or "in-cluster service account / default kubeconfig"
            raise errors.ConfigError(
                f"cannot load Kubernetes credentials from {where}: {exc}; pass --kubeconfig "
                "with a readable file, or run in a pod with a service account"
            ) from exc
        # NB: one connection per concurrent call: the controller's workers and informer
        # watches run at once, beyond the client's default pool of 5 per CPU.
        configuration.connection_pool_maxsize = max(
            configuration.connection_pool_maxsize, POOL_CONNECTIONS
        )
        api_client = client.ApiClient(configuration)
        # NB: the API server's audit log and APF classify requests by user agent.
        api_client.user_agent = component
        return cls(
            _api.KubeAPI(api_client, watch_idle_timeout_s=watch_idle_timeout_s),
            component=component,
            event_namespace=event_namespace,
        )

    def close(self) -> None:
        self._api.close()

    def server_version(self) -> str:
        """`core.ports.ServerVersion`: the API server's `gitVersion` (GET /version)."""
        answer = self._api.request_json(_codec.Request(method="GET", path="/version"))
        version = answer.get("gitVersion")
        if not isinstance(version, str) or not version:
            raise errors.ClusterError(f"GET /version answered no gitVersion: {answer!r:.200}")
        return version

    def get(self, kind: str, *, namespace: str, name: str) -> Mapping[str, Any]:
        request = _codec.get_request(kinds.by_kind(kind), namespace=namespace, name=name)
        return self._api.request_json(request)

    def list(
        self, kind: str, *, namespace: str = "", label_selector: ports.LabelSelector | None = None
    ) -> ports.ListResult:
        request = _codec.list_request(
            kinds.by_kind(kind), namespace=namespace, label_selector=label_selector
        )
        return _codec.list_result(self._api.request_json(request))

    def watch(
        self, kind: str, *, namespace: str = "", resource_version: str, timeout_s: float,
        label_selector: ports.LabelSelector | None = None,
    ) -> Iterator[ports.WatchEvent]:
        request = _codec.watch_request(
            kinds.by_kind(kind),
            namespace=namespace,
            resource_version=resource_version,
            timeout_s=timeout_s,
            label_selector=label_selector,
        )
        for line in self._api.stream_lines(request, timeout_s=timeout_s):
            event = _codec.watch_event_from_line(line, request=request)
            if event is not None:
                yield event

    def create(self, kind: str, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._api.request_json(_codec.create_request(kinds.by_kind(kind), obj))

    def patch(
        self,
        kind: str,
        *,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        subresource: str = "",
        resource_version: str = "",
    ) -> Mapping[str, Any]:
        request = _codec.patch_request(
            kinds.by_kind(kind),
            namespace=namespace,
            name=name,
            patch=patch,
            subresource=subresource,
            resource_version=resource_version,
        )
        try:
            return self._api.request_json(request)
        except errors.ClusterError as exc:
            if subresource not in ("", "status") or not _codec.is_immutable_field_error(exc):
                raise
            log.info(
                "event=patch_replaced_by_update kind=%s namespace=%s name=%s subresource=%s "
                "reason=%r", kind, namespace, name, subresource or "-",
                "opaque config bytes a merge patch re-encodes",
            )
            return self._replace_with_patch(
                kind, namespace=namespace, name=name, patch=patch,
                resource_version=resource_version, subresource=subresource,
            )

    def _replace_with_patch(
        self,
        kind: str,
        *,
        namespace: str,
        name: str,
        patch: Mapping[str, Any],
        resource_version: str,
        subresource: str = "",
    ) -> Mapping[str, Any]:
        """GET, merge `patch` locally, PUT the object back in the bytes the client sent it in.

        For objects an older driver (or any client writing spaced JSON) created: the API server
        compares their opaque config bytes on every update (a claim's allocation copies them
        too), and a merge patch re-encodes them (422 "field is immutable"); a PUT of the object
        as read reproduces them exactly. `subresource` "status" PUTs the status (the patch's
        `status` merged); else the patch's `status` is left out, as the main resource ignores
        it. `resource_version`, when given, is checked as the patch would have (ConflictError).
        """
        current = self.get(kind, namespace=namespace, name=name)
        current_version = str((current.get("metadata") or {}).get("resourceVersion") or "")
        if resource_version and resource_version != current_version:
            raise errors.ConflictError(
                f"{kind} {namespace}/{name}: the object changed since it was read "
                f"(resourceVersion {resource_version} is now {current_version}); re-read and retry"
            )
        merged = patch if subresource == "status" else {
            k: v for k, v in patch.items() if k != "status"}
        updated = mergepatch.merge_patch(current, merged)
        updated["metadata"]["resourceVersion"] = current_version
        return self._api.request_json(
            _codec.replace_request(kinds.by_kind(kind), updated, subresource=subresource))

    def delete(self, kind: str, *, namespace: str, name: str) -> None:
        self._api.request_json(
            _codec.delete_request(kinds.by_kind(kind), namespace=namespace, name=name)
        )

    def emit_event(
        self, *, involved: models.ObjectRef, reason: str, message: str, warning: bool = True
    ) -> None:
        """Record a core/v1 Event; failures are logged, never raised (events are best effort).

        A repeat of an event this process recorded (same object, reason and message) bumps
        the existing Event's count instead of creating another, as client-go's recorder does.
        """
        key = (involved.kind, involved.namespace, involved.name, involved.uid, reason, message)
        if self._bump_repeated_event(key):
            return
        event = _codec.event_object(
            involved=involved,
            reason=reason,
            message=message,
            warning=warning,
            component=self._component,
            now=self._wall_clock(),
            default_namespace=self._event_namespace,
        )
        try:
            created = self.create(kinds.EVENT.kind, event)
            meta = created.get("metadata") or {}
            self._remember_event(key, _RecordedEvent(
                namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), count=1,
            ))
        except errors.ClusterError as exc:
            log.warning(
                "event not recorded kind=%s name=%s namespace=%s reason=%s error=%s",
                involved.kind,
                involved.name,
                involved.namespace,
                reason,
                exc,
            )


    def _remember_event(self, key: _EventKey, recorded: _RecordedEvent) -> None:
        with self._events_lock:
            self._events[key] = recorded
            self._events.move_to_end(key)
            while len(self._events) > RECORDED_EVENTS_MAX:
                self._events.popitem(last=False)

    def _bump_repeated_event(self, key: _EventKey) -> bool:
        """PATCH count+1 of an Event this process recorded; False when there is none (any more)."""
        with self._events_lock:
            recorded = self._events.get(key)
        if recorded is None:
            return False
        count = recorded.count + 1
        try:
            self.patch(
                kinds.EVENT.kind,
                namespace=recorded.namespace,
                name=recorded.name,
                patch={"count": count, "lastTimestamp": _codec.rfc3339(self._wall_clock())},
            )
        except errors.ClusterError:
            # Expired (events have a TTL) or unreachable: record a fresh Event instead.
            with self._events_lock:
                self._events.pop(key, None)
            return False
        self._remember_event(key, dataclasses.replace(recorded, count=count))
        return True

@dataclasses.dataclass(frozen=True, kw_only=True)
class _RecordedEvent:
    namespace: str
    name: str
    count: int


_EventKey = tuple[str, str, str, str, str, str]
# Enough for every distinct (object, reason, message) a controller reports in a burst.
RECORDED_EVENTS_MAX = 4096
