"""The record index's files through Hadoop's file system API, which knows every scheme Spark writes
to (file, hdfs, s3a)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class HadoopFiles:
    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark

    def _fs(self, path: str):
        hpath = self._spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path)
        return hpath.getFileSystem(self._spark.sparkContext._jsc.hadoopConfiguration()), hpath

    def exists(self, path: str) -> bool:
        fs, hpath = self._fs(path)
        return bool(fs.exists(hpath))

    def mkdirs(self, path: str) -> None:
        fs, hpath = self._fs(path)
        fs.mkdirs(hpath)

    def rename(self, src: str, dst: str) -> bool:
        fs, hsrc = self._fs(src)
        return bool(fs.rename(hsrc, self._fs(dst)[1]))

    def delete(self, path: str) -> None:
        fs, hpath = self._fs(path)
        fs.delete(hpath, True)

    def children(self, root: str) -> list[tuple[str, float]]:
        fs, hroot = self._fs(root)
        if not fs.exists(hroot):
            return []
        return [(s.getPath().getName(), float(s.getModificationTime())) for s in fs.listStatus(hroot)]

    def size(self, path: str) -> int:
        fs, hpath = self._fs(path)
        if not fs.exists(hpath):
            return 0
        files = fs.listFiles(hpath, True)
        total = 0
        while files.hasNext():
            status = files.next()
            if not status.getPath().getName().startswith((".", "_")):  # eoctl.engine.files.hidden's rule
                total += int(status.getLen())
        return total

    def listing(self, root: str) -> dict[str, int]:
        fs, hroot = self._fs(root)
        if not fs.exists(hroot):
            return {}
        if fs.getFileStatus(hroot).isFile():
            return {hroot.getName(): int(fs.getFileStatus(hroot).getLen())}
        top = str(fs.makeQualified(hroot).toString()).rstrip("/")
        files = fs.listFiles(hroot, True)
        out = {}
        while files.hasNext():
            status = files.next()
            full = str(status.getPath().toString())
            rel = full[len(top) + 1:] if full.startswith(top + "/") else status.getPath().getName()
            if not any(part.startswith((".", "_")) for part in rel.split("/")):  # eoctl.engine.files.hidden's rule
                out[rel] = int(status.getLen())
        return out
