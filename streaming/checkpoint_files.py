"""Files of the streaming job's own beside Spark's in its checkpoint directory, local or behind a URI.

A local path is used as is; a URI (``hdfs://``, ``s3a://``, ``file://``...) goes through Hadoop's file system on the
driver's JVM, as Spark's own checkpoint does. Only the driver reads and writes them. A write is atomic (a temporary
name renamed into place), so a crash leaves the former content or the new one, never half of it.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession


class CheckpointFiles:
    """Named files (``"a/b"``: slash-separated, relative) under a checkpoint directory."""

    def __init__(self, spark: SparkSession, checkpoint: str) -> None:
        self.checkpoint = checkpoint.rstrip("/") if "://" in checkpoint else checkpoint
        self._spark = spark
        self._local = "://" not in checkpoint

    def read(self, name: str) -> bytes | None:
        """The file's bytes; None when it does not exist."""
        if self._local:
            path = Path(self.checkpoint, name)
            return path.read_bytes() if path.exists() else None
        fs, path = self._hadoop(name)
        if not fs.exists(path):
            return None
        stream = fs.open(path)
        try:
            return bytes(self._jvm().org.apache.commons.io.IOUtils.toByteArray(stream))
        finally:
            stream.close()

    def write(self, name: str, data: bytes) -> None:
        """Write the file atomically (parents made as needed), replacing an older one."""
        temporary = f"{name}.{uuid.uuid4().hex[:8]}.tmp"
        if self._local:
            target, staged = Path(self.checkpoint, name), Path(self.checkpoint, temporary)
            target.parent.mkdir(parents=True, exist_ok=True)
            staged.write_bytes(data)
            os.replace(staged, target)
            return
        fs, staged_path = self._hadoop(temporary)
        _, target_path = self._hadoop(name)
        out = fs.create(staged_path, True)
        try:
            out.write(bytearray(data))
        finally:
            out.close()
        fs.delete(target_path, False)
        if not fs.rename(staged_path, target_path):
            raise OSError(f"cannot rename {staged_path} to {target_path}")

    def create_once(self, name: str, data: bytes) -> bytes:
        """The file's content, written with ``data`` first if it does not exist yet."""
        existing = self.read(name)
        if existing is not None:
            return existing
        self.write(name, data)
        written = self.read(name)
        assert written is not None
        return written

    def names(self, directory: str) -> list[str]:
        """The names of the files in ``directory`` (empty when it does not exist)."""
        if self._local:
            path = Path(self.checkpoint, directory)
            return sorted(p.name for p in path.iterdir() if p.is_file()) if path.is_dir() else []
        fs, path = self._hadoop(directory)
        if not fs.exists(path):
            return []
        return sorted(str(status.getPath().getName()) for status in fs.listStatus(path) if status.isFile())

    def delete(self, name: str) -> None:
        """Remove the file if it exists."""
        if self._local:
            Path(self.checkpoint, name).unlink(missing_ok=True)
            return
        fs, path = self._hadoop(name)
        fs.delete(path, False)

    def _jvm(self) -> Any:
        jvm = self._spark.sparkContext._jvm
        assert jvm is not None
        return jvm

    def _hadoop(self, name: str) -> tuple[Any, Any]:
        path = self._jvm().org.apache.hadoop.fs.Path(f"{self.checkpoint}/{name}")
        return path.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()), path
