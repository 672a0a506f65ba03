"""Text vitlit did not write (file and class names, values read from files, URLs) made safe where it goes.

A file or class name can hold anything but ``/`` and NUL: terminal escapes that retitle or clear the terminal,
newlines that forge log lines or YAML keys, right-to-left overrides that reverse what a reader sees, Markdown and
HTML. Each destination gets its own form: `shown` for terminals and line-based files, `markdown` for Markdown,
`redacted` for anything that may hold a URL with credentials. Formats with their own quoting (JSON, CSV, YAML written
by a YAML library) need none of these.
"""

from __future__ import annotations

import re

#: What a terminal or an editor acts on instead of showing: C0 and C1 controls (escapes, newlines, carriage
#: returns, tabs), DEL, the bidirectional and zero-width format characters, line/paragraph separators, and lone
#: surrogates (the undecodable bytes of a non-UTF-8 name).
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
#: Characters Markdown or HTML would read as syntax inside a line (emphasis, links, code, tables, HTML, math).
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&$#])")
#: The user-info of a URL (``scheme://user:password@host``, or a token as the user) and secret-looking query parameters.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s]+@")
_SECRET_QUERY = re.compile(r"(?i)([?&;](?:password|passwd|pwd|token|access_token|api_key|apikey|secret|sig)=)[^&;#\s]*")


def shown(text: object) -> str:
    r"""``text`` on one line, each character a terminal would act on written as its Python escape (ESC as ``\x1b``)."""
    return _ACTIVE.sub(lambda m: ascii(m.group())[1:-1], str(text))


def markdown(text: object) -> str:
    """``text`` as literal running text in Markdown (and the HTML it may hold).

    `shown`, then every syntax character backslash-escaped: a class named ``<img src=x>`` or ``# h`` reads as written.
    """
    return _MARKDOWN.sub(r"\\\1", shown(text))


def redacted(text: object) -> str:
    """``text`` with every URL's user-info (``scheme://user:password@host``) and secret query values as ``***``.

    Error lines and logs are read and pasted by others; the query parameters are those named like secrets (``token``).
    """
    text = _USERINFO.sub(r"\1***@", str(text))
    return _SECRET_QUERY.sub(r"\1***", text)
