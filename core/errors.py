"""Typed errors. Planners return them as values; adapters and apps raise or report them.

Every message is written for the person reading a pod event or a log line: what is
wrong, and what to change to fix it.
"""

from __future__ import annotations


class DriverError(Exception):
    """Base of every error this driver reports on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.message == getattr(other, "message", None)

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.message))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class PermanentError(DriverError):
    """Reported to the kubelet at once; retrying cannot help (bad config, wrong mode)."""


class RetryableError(DriverError):
    """Transient (conflict, not ready yet); may be retried within the kubelet's budget."""


class ConfigError(DriverError):
    """Invalid driver configuration (flags, env, Helm values): the process must not start."""


class DecodeError(PermanentError):
    """An object or opaque config could not be decoded; names the offending field."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class CheckpointCorruptError(DriverError):
    """The checkpoint bytes fail the version/checksum/shape checks."""


class ClusterError(DriverError):
    """Base for errors a cluster port raises (API server or the embedded cluster)."""


class NotFoundError(ClusterError):
    """The object does not exist (HTTP 404)."""


class AlreadyExistsError(ClusterError):
    """An object with that name exists (HTTP 409 on create)."""


class ConflictError(ClusterError):
    """The resourceVersion is stale (HTTP 409 on update)."""


class GoneError(ClusterError):
    """The watch resourceVersion is too old (HTTP 410): relist."""
