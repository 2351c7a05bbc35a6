"""Values that came from data, made inert for printing: ids and names read from topics and tables
never reach a terminal, a report or a pasted ticket as control sequences or line breaks.

Control characters (C0, DEL, C1) and Unicode format characters (bidirectional overrides, zero
widths) are written as Python escapes (`\\x1b`, `\\n`, `\\u202e`), so what is printed is what is
stored, on one line, and a terminal does nothing with it.
"""

from __future__ import annotations

import re

# every code point a terminal may act on or that changes how a line reads
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def inert(value: object) -> str:
    """`value` as text with every unsafe character escaped (see the module's doc)."""
    text = value if isinstance(value, str) else str(value)
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(_escape, text)



def _escape_for_shell(match: re.Match[str]) -> str:
    ch = match.group(0)
    if ch in _NAMED:
        return _NAMED[ch]
    code = ord(ch)  # bash's \xNN is a byte: a code point past ASCII is \uNNNN
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def shell_word(value: str) -> str:
    """`value` as one word of a POSIX shell command line, inert: shell-quoted, or, when it holds a
    character a terminal acts on, bash's $'...' with that character escaped, which the shell
    turns back into the very value."""
    import shlex

    if _UNSAFE.search(value) is None:
        return shlex.quote(value)
    return "$'" + _UNSAFE.sub(_escape_for_shell, value.replace("\\", "\\\\").replace("'", "\\'")) + "'"
