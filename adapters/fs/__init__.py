"""Adapter for the node's files: checkpoint, CDI spec directory, procfs readers.

Every write here is atomic (temp file in the same directory, fsync, rename, directory
fsync); see `adapters.fs._atomic`.
"""

from adapters.fs.cdi import CDIDirectory
from adapters.fs.checkpoints import FileCheckpointStore
from adapters.fs.procfs import ProcNodeFiles

__all__ = ["CDIDirectory", "FileCheckpointStore", "ProcNodeFiles"]
