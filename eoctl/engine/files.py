"""The few file-system operations the record index needs (exists, rename, delete, list), for each
engine: the Spark engine through Hadoop's file system API, which knows every scheme Spark writes to
(file, hdfs, s3a); the DuckDB engine through fsspec, which knows what DuckDB and Python read."""

from __future__ import annotations

from typing import Any, Protocol


class IndexFiles(Protocol):
    def exists(self, path: str) -> bool: ...

    def mkdirs(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> bool: ...

    def delete(self, path: str) -> None:
        """Remove a folder and all below it; a missing path is no error."""

    def children(self, root: str) -> list[tuple[str, float]]:
        """(name, modification time in epoch milliseconds) of each entry of `root`; [] when it
        does not exist."""

    def size(self, path: str) -> int:
        """The bytes of the data files under `path`: every file but the hidden ones a writer leaves
        beside them and readers skip (Hadoop's `.crc` checksums, `_SUCCESS`), so that one folder
        measures the same on both engines."""

    def listing(self, root: str) -> dict[str, int]:
        """The data files below `root` (a path under it -> bytes; a file: its own name), as Spark's
        file sources list them: none below a name starting with `_` or `.`; {} when it does not
        exist. The same keys on both engines."""


def hidden(name: str) -> bool:
    """A file Parquet readers skip (Hadoop's and Spark's convention): `.crc`, `_SUCCESS`, ..."""
    return name.startswith((".", "_"))


def index_files(spark: Any) -> IndexFiles:
    """The file system of the record index: Spark's when a session is given, else fsspec's."""
    if spark is None:
        return FsspecFiles()
    from eoctl.engine.spark.files import HadoopFiles

    return HadoopFiles(spark)


class FsspecFiles:
    def _fs(self, path: str):
        import fsspec

        fs, _, (resolved,) = fsspec.get_fs_token_paths(path)
        return fs, resolved

    def exists(self, path: str) -> bool:
        fs, p = self._fs(path)
        return bool(fs.exists(p))

    def mkdirs(self, path: str) -> None:
        fs, p = self._fs(path)
        fs.makedirs(p, exist_ok=True)

    def rename(self, src: str, dst: str) -> bool:
        fs, s = self._fs(src)
        d = self._fs(dst)[1]
        if fs.exists(d):  # as Hadoop's rename: never onto an existing folder
            return False
        fs.mv(s, d, recursive=True)
        return True

    def delete(self, path: str) -> None:
        fs, p = self._fs(path)
        if fs.exists(p):
            fs.rm(p, recursive=True)

    def size(self, path: str) -> int:
        fs, p = self._fs(path)
        if not fs.exists(p):
            return 0
        found = fs.find(p, detail=True)
        return sum(int(info.get("size") or 0) for name, info in found.items()
                   if info.get("type") != "directory" and not hidden(name.rstrip("/").rsplit("/", 1)[-1]))

    def listing(self, root: str) -> dict[str, int]:
        fs, p = self._fs(root)
        if not fs.exists(p):
            return {}
        if fs.isfile(p):
            return {p.rstrip("/").rsplit("/", 1)[-1]: int(fs.info(p).get("size") or 0)}
        top = p.rstrip("/")
        out = {}
        for name, info in fs.find(p, detail=True).items():
            rel = name[len(top) + 1:]
            if info.get("type") != "directory" and not any(hidden(part) for part in rel.split("/")):
                out[rel] = int(info.get("size") or 0)
        return out

    def children(self, root: str) -> list[tuple[str, float]]:
        fs, p = self._fs(root)
        if not fs.exists(p):
            return []
        out = []
        for info in fs.ls(p, detail=True):
            mtime = info.get("mtime") or info.get("LastModified") or 0
            stamp = mtime.timestamp() if hasattr(mtime, "timestamp") else float(mtime)
            out.append((info["name"].rstrip("/").rsplit("/", 1)[-1], stamp * 1000))
        return out
