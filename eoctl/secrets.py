"""The one masking rule: what is a secret, by its name and by what a value carries.

Every output goes through it: `config check`, JSON and text on stdout and stderr, the error
line, logs, the findings history, the run log, metrics, evidence; Spark gets the same rule as
regular expressions (`spark_redaction`) for its own logs, UI and event log.

- By name: `is_secret_name` (password, secret, token, credential, jaas, pem, sas, sig, signature,
  keyfile, an account/access/private/... key), unless the name points at a secret rather than
  holding it (`...location`, `...path`, `...url`, `...type`, `...id`, `...table`, ...). It applies
  to typed secret fields and the free-form option tables of the configuration, never to column
  or table names (`token_id`, `tokens`, `key_columns` stay visible).
- By value: `mask_text` masks `NAME=value` where NAME is a secret name (connection strings:
  `AccountKey=`, `SharedAccessSignature=`, `password=`, `pwd=`, `sig=`, `token=`; JAAS
  `password="..."`; `clientSecret=`), `"name": "value"` pairs of JSON or dict reprs, PEM blocks,
  the password of `user:password@` in URLs and bearer tokens, wherever they stand.

The expressions use only syntax that Python's `re` and Java's `java.util.regex` read alike, so
Spark applies exactly this rule.
"""

from __future__ import annotations

import logging
import re
from typing import Any

MASK = "********"

# Fragments that name a secret. A bare "key" (a Kafka record key, s3fs's access key id, a key
# column) is not one; a key qualified as an account, access, private, ... key is.
_SECRET_WORDS = (
    r"password|passwd|passphrase|pwd|secret|credential|jaas|signature|keyfile|authorization"
    r"|token(?!s)"
    r"|(?:account|access|secret|private|shared|api|ssl|client|encryption|master|signing|storage|keystore"
    r"|service|hmac|session)[._-]?key(?![a-z])"
    r"|(?<![a-z])(?:sas|sig|pem|pass)(?![a-z])"
)
# Last words that make a name point at a secret (where it is, what kind) instead of holding it.
_REFERENCE_WORDS = ("location", "path", "file", "dir", "url", "uri", "endpoint", "type", "algorithm", "provider",
                    "class", "id", "ids", "name", "table", "columns", "column", "length", "size", "bits", "enabled")
_EXEMPT = (r"(?:[._-](?:" + "|".join(_REFERENCE_WORDS) + r")"
           r"|(?-i:[a-z0-9](?:" + "|".join(w.capitalize() for w in _REFERENCE_WORDS) + r")))")

#: a secret name anywhere in a string (a configuration key; Spark tests keys and values)
NAME_REGEX = rf"(?i)^(?!.*{_EXEMPT}$).*(?:{_SECRET_WORDS})"

_NAME_CHAR = r"[\w.-]"
_SECRET_KEY = (rf"(?={_NAME_CHAR}*(?i:{_SECRET_WORDS}))(?!{_NAME_CHAR}*(?i:{_EXEMPT})(?!{_NAME_CHAR}))"
               rf"{_NAME_CHAR}+")
_PEM = r"-----BEGIN[A-Z0-9 ]*-----[\s\S]*?(?:-----END[A-Z0-9 ]*-----|$)"
_QUOTED = r"\\\"(?:[^\"\\]|\\[^\"])*\\\"|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
# Each alternative captures what stays (the name and its `=`) in its one group; the rest is the secret.
#: every secret a value can carry
VALUE_REGEX = "|".join((
    rf"(){_PEM}",
    r"(?<=://)([^:/?#@\s]+:)[^@/?#\s]+(?=@)",  # user:password@host
    r"((?<![A-Za-z])(?i:bearer)\s+)[A-Za-z0-9._~+/-]{16,}=*",
    rf"([\"']{_SECRET_KEY}[\"']\s*[:=]\s*)(?:{_QUOTED})",  # "name": "value" (JSON, dict reprs)
    rf"((?<!{_NAME_CHAR}){_SECRET_KEY}\s*(?:=|->)\s*)(?:{_PEM}|{_QUOTED}|[^\s;&\"']+)",  # name=value, Scala's ->
))

_NAME = re.compile(NAME_REGEX)
_VALUE = re.compile(VALUE_REGEX)
#: what Java's Matcher (Spark's regexp_replace) puts for a match of VALUE_REGEX: the kept group, then MASK
JAVA_REPLACEMENT = "".join(f"${i}" for i in range(1, _VALUE.groups + 1)) + MASK


def is_secret_name(name: str) -> bool:
    """Whether a setting of this name holds a secret (`fs.s3a.secret.key`, `sasl.jaas.config`)."""
    return _NAME.search(name) is not None


# fsspec's object stores name their credentials plainly: s3fs's `key` is the access key id (a bare
# `key` is no secret elsewhere: a Kafka record's key, a sink's key columns)
_BLOB_CREDENTIALS = frozenset({"key", "access_key", "access_key_id", "aws_access_key_id", "username"})


def is_secret_option(table: str, name: str) -> bool:
    """Whether setting `name` of the option table `table` (blob_options, client_properties, ...)
    holds a secret: a secret name anywhere, and a blob store's credential names in blob_options."""
    return is_secret_name(name) or (table == "blob_options" and name.lower() in _BLOB_CREDENTIALS)


def _masked(match: re.Match[str]) -> str:
    kept = next((g for g in match.groups() if g is not None), "")
    value = match.group(0)[len(kept):]
    for quote in ('\\"', '"', "'"):  # a quoted value stays quoted: JSON and JAAS text stay readable
        if len(value) > len(quote) and value.startswith(quote):
            return f"{kept}{quote}{MASK}{quote}"
    return kept + MASK


#: what every alternative of VALUE_REGEX needs in the text (a `=`, `:` or `->`, a PEM header, a
#: bearer): text without any cannot carry a secret, and is not matched against the whole rule
#: (an audit's evidence is mostly ids: a third of a 10M-record incremental audit's Python time)
_MAY_CARRY = re.compile(r"[=:>]|-----BEGIN|(?i:bearer)")
#: and what every alternative needs besides: a PEM header, a bearer, a URL's `://` or a word of a
#: secret name (each word of _SECRET_WORDS holds one of these). Values of JSON text (EO502's
#: differing values, `"amount": 100`) all have a colon: 1,000 evidence rows took 0.13 s to mask
_MAY_NAME = re.compile(r"(?i:pass|pwd|secret|credential|jaas|sig|key|authorization|token|sas|pem|bearer)"
                       r"|-----BEGIN|://")


def mask_text(text: str) -> str:
    """`text` with every secret a value can carry replaced by MASK (names and `=` kept)."""
    return _VALUE.sub(_masked, text) if _MAY_CARRY.search(text) and _MAY_NAME.search(text) else text


def redact(value: Any) -> Any:
    """Every string in nested dicts and lists through `mask_text`; keys and other values as they are."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact(v) for v in value]
    return value


def spark_redaction(remote: bool = False) -> dict[str, str]:
    """Spark settings that apply this rule to Spark's own logs, UI and event log.

    Spark's default name rule is kept beside ours so that nothing it hid shows. Over Spark Connect
    only session (SQL) settings can be set: they redact plans and their options.
    """
    names = f"{NAME_REGEX}|(?i)secret|password|token|access[.]?key"
    if remote:
        return {"spark.sql.redaction.options.regex": f"{names}|(?i)url",
                "spark.sql.redaction.string.regex": VALUE_REGEX}
    return {"spark.redaction.regex": names, "spark.redaction.string.regex": VALUE_REGEX}


class MaskingFilter(logging.Filter):
    """Masks a log record's message, traceback and stack before any handler formats it."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = mask_text(record.getMessage()), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_text(record.stack_info)
        return True
