"""Load the TOML configuration: read, interpolate ${ENV} secrets, validate, apply overrides.

Precedence is flag > environment > file. Every error names the file, the key and what is
expected, in one line.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr, ValidationError

from eoctl.config.model import Config
from eoctl.errors import ConfigError, UsageError
from eoctl.secrets import MASK, is_secret_name, is_secret_option, mask_text

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

DEFAULT_CONFIG = Path("eoctl.toml")
CONFIG_ENV = "EOCTL_CONFIG"

#: environment variables that override engine settings (flags override these in turn)
ENGINE_ENV = {"kind": "EOCTL_ENGINE", "master": "EOCTL_MASTER", "remote": "EOCTL_REMOTE",
              "jars_dir": "EOCTL_JARS_DIR", "class_archive": "EOCTL_CLASS_ARCHIVE"}

# ${NAME} or ${NAME:-default}; $${ is a literal "${".
_INTERPOLATION = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def interpolate(value: Any, environ: Mapping[str, str], where: str = "") -> Any:
    """Replace ${VAR} in every string of a parsed TOML tree; an unset variable is an error."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ, f"{where}.{k}" if where else k) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$${":
            return "${"
        name, default = match.group(1), match.group(2)
        if name in environ:
            return environ[name]
        if default is not None:
            return default
        raise ConfigError(f"{where}: environment variable {name} is not set (it is referenced as ${{{name}}})")

    return _INTERPOLATION.sub(substitute, value)


def _format_location(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif item in ("duckdb", "postgres", "mysql") and parts:  # discriminated-union tags are not keys
            continue
        else:
            parts.append(("." if parts else "") + str(item))
    return "".join(parts)


def _nearest_key(key: str) -> str | None:
    """The configuration key `key` was most likely meant as (difflib), of every key the model has."""
    import difflib

    from pydantic import BaseModel

    from eoctl.config import model

    known: set[str] = set()
    for value in vars(model).values():
        if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel:
            for name, field in value.model_fields.items():
                known.add(field.alias or name)
    found = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
    return found[0] if found else None


def _describe(error: Any) -> str:
    kind, msg, loc = error["type"], error["msg"], _format_location(error["loc"])
    if kind == "extra_forbidden":
        near = _nearest_key(str(error["loc"][-1]))
        return f"unknown key '{loc}'" + (f" (did you mean '{near}'?)" if near else "")
    if kind == "missing":
        return f"{loc}: required key is missing"
    if kind == "union_tag_invalid":
        return f"{loc}: 'type' must be 'duckdb', 'postgres' or 'mysql'"
    if kind == "union_tag_not_found":
        return f"{loc}: 'type' is required ('duckdb', 'postgres' or 'mysql')"
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    got = error.get("input")
    # a secret's value is never echoed, also when it is the wrong type
    hidden = isinstance(got, (dict, list)) or kind == "value_error" or any(
        isinstance(item, str) and is_secret_name(item) for item in error["loc"])
    shown = "" if hidden else f", got {mask_text(repr(got))}"
    prefix = f"{loc}: " if loc else ""
    return f"{prefix}{msg[0].lower() + msg[1:]}{shown}"


def _set_engine(raw: dict[str, Any], key: str, value: str) -> None:
    engine = raw.setdefault("engine", {})
    if not isinstance(engine, dict):
        raise ConfigError("engine: expected a table [engine]")
    engine[key] = value
    if key == "remote":
        engine.pop("master", None)
    if key == "master":
        engine.pop("remote", None)


def resolve_config_path(flag: Path | None, environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    if flag is not None:
        return flag
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    return DEFAULT_CONFIG


def load_config(
    path: Path,
    *,
    overrides: Mapping[str, str | None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Config:
    """Read and validate `path`; `overrides` are engine flags (kind, master, remote, jars_dir)."""
    environ = os.environ if environ is None else environ
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: configuration file not found",
            hint=f"pass --config PATH, set {CONFIG_ENV}, or create ./eoctl.toml",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read configuration file: {exc}") from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None

    try:
        raw = interpolate(raw, environ)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc.message}") from None

    # file < environment < flags; a Spark master or Connect URL given at a level means Spark,
    # unless that level also names the engine (then both must agree)
    for level, values in (("environment", {k: environ.get(e) for k, e in ENGINE_ENV.items()}),
                          ("flags", dict(overrides or {}))):
        given = {k: v for k, v in values.items() if v}
        spark_only = [k for k in ("master", "remote") if k in given]
        if spark_only and given.get("kind", "spark") != "spark":
            names = ("--engine", "--master/--remote") if level == "flags" else (
                "EOCTL_ENGINE", "EOCTL_MASTER/EOCTL_REMOTE")
            raise UsageError(f"{names[1]} means the Spark engine: it does not combine with {names[0]} {given['kind']}")
        if spark_only:
            given.setdefault("kind", "spark")
        for key, value in given.items():
            _set_engine(raw, key, value)

    try:
        return Config.model_validate(raw, context={"base_dir": path.resolve().parent, "source": path.resolve()})
    except ValidationError as exc:
        problems = [_describe(e) for e in exc.errors()]
        more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''}: eoctl config check " \
               "lists them)" if len(problems) > 1 else ""
        raise ConfigError(f"{path}: {problems[0]}{more}", problems=problems) from None


# Free-form option tables hold settings under client-specific names (sasl.jaas.config, s3fs
# "secret", JDBC "password"): there a secret is known by its name. Typed secrets are SecretStr.
_FREE_FORM = {"client_properties", "spark_properties", "options", "blob_options", "conf"}


def masked(config: Config) -> dict[str, Any]:
    """The resolved configuration as plain data with every secret replaced by MASK: SecretStr
    fields, secret names in option tables, and secrets inside any value (eoctl.secrets)."""

    def walk(value: Any, key: str = "", free_form: bool = False, table: str = "") -> Any:
        if isinstance(value, SecretStr):
            return MASK
        if isinstance(value, dict):
            inner = key in _FREE_FORM
            return {k: walk(v, str(k), inner, key if inner else "") for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, key, free_form, table) for v in value]
        if isinstance(value, str):
            return MASK if free_form and is_secret_option(table, key) else mask_text(value)
        return value

    # model_dump keeps SecretStr objects, so secrets are masked before anything becomes a string.
    return walk(config.model_dump(by_alias=True))
