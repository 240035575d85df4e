"""The plugin's fabric judgment left in the per-domain directories (`fabric_watch`).

Covers: no judgment (the first read failed) leaves no file, and removes one an earlier run
left; the first successful read writes it even though healthy is no change; each change is
written to every domain directory; a prepared directory gets the judgment of that moment.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

from adapters.fs import fabric_health_file
from adapters.memory import cluster as memory_cluster
from apps.kubeletplugin import fabric_watch
from core import models
from core.computedomain import fabric_health

S = models.FabricState
HEALTHY = [models.FabricRecord(gpu_uuid="GPU-0", state=S.COMPLETED, cluster_uuid=b"\x01" * 16)]
FORMING = [models.FabricRecord(gpu_uuid="GPU-0", state=S.IN_PROGRESS, cluster_uuid=b"\x01" * 16)]


def test_the_files_follow_the_judgment(tmp_path: pathlib.Path) -> None:
    answers: list[Sequence[models.FabricRecord] | Exception] = [
        RuntimeError("probe crashed"), HEALTHY, FORMING]

    def probe() -> Sequence[models.FabricRecord]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    files: list[fabric_watch.DomainFabricFiles] = []
    watch = fabric_watch.FabricWatch(
        node_name="n1", probe=probe, cluster=memory_cluster.InMemoryCluster(),
        on_change=lambda: None, on_judgment=lambda: files[0].sync_all())
    files.append(fabric_watch.DomainFabricFiles(root=str(tmp_path), judgment=watch.judgment))
    a, b = tmp_path / "cd-a", tmp_path / "cd-b"
    a.mkdir()
    b.mkdir()
    fabric_health_file.write(str(a), fabric_health.judge(FORMING))  # left by an earlier run
    (tmp_path / "not-a-dir").write_text("x", encoding="utf-8")

    watch.check()  # fails: nothing known
    files[0].sync_all(starting=True)
    assert watch.judgment() is None
    assert fabric_health_file.read(str(a)) is None and fabric_health_file.read(str(b)) is None

    watch.check()  # healthy: no change of health, but now a judgment
    assert fabric_health_file.read(str(a)) == fabric_health_file.read(str(b)) == (
        fabric_health.NOT_JUDGED)

    watch.check()
    for directory in (a, b):
        found = fabric_health_file.read(str(directory))
        assert found is not None and found.reason == "InProgress"

    c = tmp_path / "cd-c"
    c.mkdir()
    files[0].prepared(str(c))
    assert fabric_health_file.read(str(c)) == fabric_health.judge(FORMING)
