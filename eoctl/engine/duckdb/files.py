"""The files the DuckDB engine reads, listed through fsspec: the data files of a topic archive or a
sink (hidden ones and Spark's markers left out), the visible files below a prefix."""

from __future__ import annotations

from eoctl.errors import SourceError


def archive_files(path: str, extension: str, what: str = "topic archive") -> list[str]:
    """The data files of an archive folder as Spark lists them: every file below `path` whose
    name does not start with `_` or `.` (Hadoop's hidden files: `_committed_offsets.json`,
    `_SUCCESS`, `.crc`). A path that is a file is itself; `extension` names the format in errors,
    `what` the dataset."""
    import fsspec

    fs, _, (root,) = fsspec.get_fs_token_paths(path)
    if not fs.exists(root):
        raise SourceError(f"{what} {path} does not exist")
    if fs.isfile(root):
        return [path]
    files = [fs.unstrip_protocol(name) if "://" in path else name for name, _info in visible_files(fs, root)]
    if not files:
        raise SourceError(f"{what} {path} holds no {extension} files")
    return files


def visible_files(fs, root: str) -> list[tuple[str, dict]]:
    """(path, fsspec info) of every file below `root` that Spark's file sources list: none below
    a name starting with `_` or `.` (Hadoop's hidden files and folders)."""
    out = []
    for name, info in sorted(fs.find(root, detail=True).items()):
        rel = name[len(root.rstrip("/")) + 1:]
        if not any(part.startswith(("_", ".")) for part in rel.split("/")):
            out.append((name, info))
    return out
