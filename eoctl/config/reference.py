"""The reference of every configuration key (docs/config-keys.md), generated from the model so
that it cannot drift: `python -m eoctl.config.reference > docs/config-keys.md`; a test holds it."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from eoctl.config import model

#: the column- and header-name tables: one row per name, its default the reference protocol's
_NAME_TABLES = {model.HeaderNames: "header", model.TokenColumns: "column", model.OutboxColumns: "column",
                model.IntentColumns: "column"}


def _type_text(annotation: Any) -> str:
    """An annotation as a TOML user reads it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        checks = {getattr(a, "func", None) for a in args[1:]}
        if model._resolve_path in checks:
            return "path"
        if model._resolve_uri in checks:
            return "URI"
        return _type_text(args[0])
    if origin is Literal:
        return " \\| ".join(f'`"{a}"`' for a in args)
    if origin in (Union, types.UnionType):
        shown = [_type_text(a) for a in args if a is not type(None)]
        return " or ".join(dict.fromkeys(shown))
    if origin is list:
        return f"list of {_type_text(args[0])}"
    if origin is dict:
        return f"table of {_type_text(args[1])}"
    return {str: "string", int: "integer", float: "number", bool: "boolean", SecretStr: "secret string",
            Path: "path"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _field_type(field: FieldInfo) -> str:
    """A field's type (pydantic keeps an Annotated field's validators in its metadata)."""
    if field.metadata:
        return _type_text(typing.Annotated[(field.annotation, *field.metadata)])
    return _type_text(field.annotation)


def _default_text(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return ""
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (list, dict)) and not value:
        return "`[]`" if isinstance(value, list) else "`{}`"
    return f'`"{value}"`' if isinstance(value, str) else f"`{value}`"


def _key(name: str, field: FieldInfo) -> str:
    return field.alias or name


def _nested(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds as a TOML table of its own (alone or beside None)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)] or [annotation]
    for a in args:
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a
    return None


def _collection(annotation: Any) -> tuple[str, Any] | None:
    """('dict' | 'list', the model or union of models held) for a table of tables / array of tables."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict and args:
        held = args[1]
    elif origin is list and args:
        held = args[0]
    else:
        return None
    members = _members(held)
    return ("dict" if origin is dict else "list", held) if members else None


def _members(annotation: Any) -> list[type[BaseModel]]:
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    return [annotation] if isinstance(annotation, type) and issubclass(annotation, BaseModel) else []


def _section(cls: type[BaseModel], path: str, what: str | None, *, variant: str | None = None,
             array: bool = False) -> Iterator[str]:
    """The section of table `path` (an `[[array]]` of tables; one `variant` of a union told apart
    by its `type` key), then those of the tables below it."""
    yield f"## `{'[[' if array else '['}{path}{']]' if array else ']'}`" + (f' with `type = "{variant}"`' if variant else "")
    yield ""
    doc = what or (cls.__doc__ or "").strip()
    if doc and cls is not model.Config:
        yield " ".join(doc.split())
        yield ""
    rows, below = [], []
    for name, field in cls.model_fields.items():
        key = _key(name, field)
        nested, collection = _nested(field.annotation), _collection(field.annotation)
        if cls in _NAME_TABLES:
            rows.append(f"| `{key}` | string | {_default_text(field)} | the {_NAME_TABLES[cls]} eoctl reads as "
                        f"`{name}` |")
            continue
        if collection is not None:
            kind, held = collection
            sub = f"{path}.{key}.NAME" if kind == "dict" else f"{path}.{key}"
            below.append((held, sub, field.description, kind == "list"))
            shape = f"tables `[{sub}]`" if kind == "dict" else f"array of tables `[[{sub}]]`"
            rows.append(f"| `{key}` | {shape} | | {field.description or ''} |")
            continue
        if nested is not None:
            below.append((nested, f"{path}.{key}", field.description, False))
            rows.append(f"| `{key}` | table `[{path}.{key}]` | | {field.description or ''} |")
            continue
        rows.append(f"| `{key}` | {_field_type(field)} | {_default_text(field)} | "
                    f"{' '.join((field.description or '').split())} |")
    if rows:
        yield "| key | type | default | what |"
        yield "|---|---|---|---|"
        yield from rows
        yield ""
    for held, sub, description, array in below:
        yield from _sections_of(held, sub, description, array=array)


def config_reference() -> str:
    lines = ["# Configuration keys", "",
             "Every key of `eoctl.toml`, generated from the configuration model by "
             "`python -m eoctl.config.reference > docs/config-keys.md`; do not edit by hand. "
             "How the file is read (precedence, `${ENV}` interpolation, paths, durations) and worked "
             "examples: [Configuration](configuration.md). A key not listed here is an error.", ""]
    for name, field in model.Config.model_fields.items():
        nested, collection = _nested(field.annotation), _collection(field.annotation)
        if collection is not None:
            lines += list(_sections_of(collection[1], f"{name}.NAME", field.description))
        elif nested is not None:
            lines += list(_section(nested, name, field.description))
    return "\n".join(lines).rstrip() + "\n"


def _sections_of(held: Any, path: str, description: str | None, *, array: bool = False) -> Iterator[str]:
    """The sections of a table (or of each kind of a union told apart by its `type` key)."""
    members = _members(held)
    if len(members) > 1:
        for member in members:
            kind = typing.get_args(member.model_fields["type"].annotation)[0]
            yield from _section(member, path, None, variant=kind)
    else:
        yield from _section(members[0], path, description, array=array)


if __name__ == "__main__":
    print(config_reference(), end="")
