"""Claim UIDs that cannot be Kubernetes UIDs are bad input: a clear per-claim error, no traceback.

The kubelet passes claim UIDs straight from the API; one that would name a file outside the CDI
root (`../../etc`) or is absurdly long must be refused as what it is, beside good claims of the
same call, without a stack trace or a megabyte-long line in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from pluginapp_env import NAMESPACE, create_claim, create_domain, node

from adapters.fs import cdi as fs_cdi
from apps.cli import embedded
from core import models, names

BAD_UIDS = ("../../etc", "x" * (1 << 20), "", "..", "a/b", "uid\0nul")


@pytest.fixture
def env() -> Iterator[embedded.Embedded]:
    with embedded.running(workdir="", mode="hostManaged", node_limit=1) as deployment:
        yield deployment


@pytest.mark.parametrize("verb", ["prepare", "unprepare"])
def test_bad_claim_uids_get_a_permanent_error_without_a_traceback(
    env: embedded.Embedded, verb: str, caplog: pytest.LogCaptureFixture
) -> None:
    good = create_claim(env, "good", domain_id=create_domain(env))
    bad = tuple(
        models.ClaimRef(uid=names.ClaimUID(uid), namespace=NAMESPACE, name=f"bad-{i}")
        for i, uid in enumerate(BAD_UIDS)
    )
    kubelet = node(env).kubelet
    call = kubelet.prepare if verb == "prepare" else kubelet.unprepare
    with caplog.at_level(logging.INFO):
        results = call(names.DRIVER_NAME, (*bad, good))
    assert results[good.uid].error == ""
    for ref in bad:
        error = results[ref.uid].error
        assert "is not a valid Kubernetes UID" in error, error
        assert "internal error" not in error
        assert len(error) < 1000
    assert [r for r in caplog.records if r.exc_info] == [], "a traceback was logged"
    assert max(len(r.getMessage()) for r in caplog.records) < 2000
    assert fs_cdi.CDIDirectory(node(env).settings.cdi_root).claim_uids() <= {good.uid}
