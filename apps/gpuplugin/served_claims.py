"""What the GPU plugin serves the kubelet: the claim driver, plus what follows each call.

Two things happen after the claim driver answered, both outside its node-wide lock:
- gate DeviceMetadata: each prepared claim's metadata files and their CDI specs are written
  (`core.device_metadata`) and the answer carries their CDI ids; an unprepared claim's are
  removed. As the kubelet plugin helper does it, after the driver's own prepare; a write
  that fails fails that claim's answer (the kubelet retries; the repeated prepare returns the
  same devices and writes the same bytes).
- gate PassthroughSupport: the slice is published again (`after_call`), so a GPU whose
  passthrough function was just prepared disappears from it, and returns after unprepare
  (`core.gpu.passthrough`), as upstream republishes after every prepare and unprepare.
Entries the stale-claim sweep drops get the same (`after_stale_cleanup`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from apps.pluginkit import claim_reads
from core import checkpoint as checkpoint_codec
from core import device_metadata, errors, models, names, ports
from core.gpu import devices

log = logging.getLogger(__name__)

# By device name: the attributes its metadata entry carries (VFIO functions, as upstream).
MetadataAttributes = Callable[[], Mapping[str, Mapping[str, models.JSONObject]]]


class GpuPluginService:
    """`ports.KubeletPluginService` around the claim driver (see the module docstring)."""

    def __init__(
        self,
        inner: ports.KubeletPluginService,
        *,
        cluster: ports.Cluster,
        driver_name: str,
        plugin_dir: str,
        metadata: ports.DeviceMetadataStore | None = None,
        attributes: MetadataAttributes = dict,
        after_call: Callable[[], None] | None = None,
    ) -> None:
        self._inner = inner
        self._reads = claim_reads.ClaimReads(cluster)
        self._driver_name = driver_name
        self._plugin_dir = plugin_dir
        self._metadata = metadata
        self._attributes = attributes
        self._after_call = after_call

    def node_prepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        answers = dict(self._inner.node_prepare(claims, call=call))
        if self._metadata is not None:
            for ref in claims:
                answer = answers.get(ref.uid)
                if answer is not None and not answer.error:
                    answers[ref.uid] = self._with_metadata(ref, answer, self._metadata)
        if claims:  # NB: not for the kubelet's empty probes
            self._after()
        return answers

    def node_unprepare(
        self, claims: tuple[models.ClaimRef, ...], *, call: ports.KubeletCall | None = None
    ) -> Mapping[names.ClaimUID, models.ClaimResult]:
        answers = dict(self._inner.node_unprepare(claims, call=call))
        if self._metadata is not None:
            for ref in claims:
                answer = answers.get(ref.uid)
                if answer is None or answer.error:
                    continue
                try:
                    self._metadata.remove(
                        claim_uid=ref.uid, namespace=ref.namespace, name=ref.name
                    )
                except errors.DriverError as exc:
                    answers[ref.uid] = models.ClaimResult(
                        error=f"clean up device metadata: {exc.message}"
                    )
        if claims:
            self._after()
        return answers

    def after_stale_cleanup(self, removed: Sequence[checkpoint_codec.StaleEntry[Any]]) -> None:
        """What follows a stale-claim round that dropped entries: their metadata files go
        (the kubelet never unprepared those claims), and the slice is published again."""
        if not removed:
            return
        if self._metadata is not None:
            for item in removed:
                entry = item.entry
                if not entry.name:  # rebuilt from a CDI spec: no name to find its files by
                    continue
                try:
                    self._metadata.remove(
                        claim_uid=entry.claim_uid, namespace=entry.namespace, name=entry.name
                    )
                except errors.DriverError as exc:
                    log.warning(
                        "event=device_metadata_cleanup_failed claim=%s/%s uid=%s error=%r",
                        entry.namespace, entry.name, entry.claim_uid, exc.message,
                    )
        self._after()

    def _with_metadata(
        self,
        ref: models.ClaimRef,
        answer: models.ClaimResult,
        store: ports.DeviceMetadataStore,
    ) -> models.ClaimResult:
        try:
            claim = self._reads.claim(ref)
            planned = device_metadata.plan_claim_metadata(
                claim, answer.devices, driver=self._driver_name, plugin_dir=self._plugin_dir,
                attributes=self._attributes(),
            )
            store.write(planned)
        except errors.DriverError as exc:
            log.warning(
                "event=device_metadata_failed claim=%s/%s uid=%s error=%r",
                ref.namespace, ref.name, ref.uid, exc.message,
            )
            return models.ClaimResult(error=f"write device metadata: {exc.message}")
        log.info(
            "event=device_metadata_written claim=%s/%s uid=%s requests=%s",
            ref.namespace, ref.name, ref.uid, ",".join(p.request for p in planned) or "-",
        )
        return models.ClaimResult(
            devices=device_metadata.with_metadata_ids(answer.devices, planned)
        )

    def _after(self) -> None:
        if self._after_call is None:
            return
        try:
            self._after_call()
        except Exception:  # the answer stands; the slice resync publishes again
            log.exception("event=republish_after_call_failed")


def vfio_attributes(
    inventory: devices.GpuInventory,
    build: Callable[[devices.VfioDeviceInfo], models.JSONObject],
) -> dict[str, Mapping[str, models.JSONObject]]:
    """By name, the slice attributes of each passthrough function (`build` publishes one)."""
    found: dict[str, Mapping[str, models.JSONObject]] = {}
    for vfio in inventory.vfios:
        try:
            attributes = build(vfio).get("attributes")
        except errors.PermanentError:
            continue  # not published either: its metadata names it without attributes
        if isinstance(attributes, Mapping):
            found[vfio.name] = attributes
    return found
