"""Text vitlit did not write (file and class names, values read from files, URLs) made safe where it goes.

A file or class name can hold anything but ``/`` and NUL: terminal escapes that retitle or clear the terminal,
newlines that forge log lines or YAML keys, right-to-left overrides that reverse what a reader sees, Markdown and
HTML. Each destination gets its own form: `shown` for terminals and line-based files, `markdown` for Markdown,
`redacted` for anything that may hold a URL with credentials, `cell` for a spreadsheet's cell. Formats with their own
quoting (JSON, YAML written by a YAML library) need none of these.

Every line vitlit prints leaves through `clean`: `say` prints vitlit's lines, and the command line's log filter
(`vitlit.runtime.quiet`) cleans Lightning's and vitlit's own ``rank_zero_info``: escapes shown, credentials redacted
wherever they stand, a library's quoted message included.
"""

from __future__ import annotations

import re
import sys
from urllib.parse import unquote

#: What a terminal or an editor acts on instead of showing: C0 and C1 controls (escapes, newlines, carriage
#: returns, tabs), DEL, the bidirectional and zero-width format characters, line/paragraph separators, and lone
#: surrogates (the undecodable bytes of a non-UTF-8 name).
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
#: `_ACTIVE` less the newline and the undecodable bytes that are no C1 control: a file name's part CSV can hold.
_IN_PATH = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\udc80-\udc9f]")
#: Characters Markdown or HTML would read as syntax inside a line (emphasis, links, code, tables, HTML, math).
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&$#])")
#: The user-info of a URL (``scheme://user:password@host``, or a token as the user) and secret-looking query parameters.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/?#@\s]+@")
_CREDENTIALS = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://([^/?#@\s]+)@")
#: The credentials seen in a URL's user-info (this process's arguments, or text passed to `redacted`): a library that
#: quotes them without the URL around them (a cloud client's "invalid key KEY") has them redacted too.
_SECRETS: set[str] = set()
#: A line longer than this is cut in what vitlit prints: a class name of a megabyte is not a message.
LONGEST_LINE = 2000
#: What a spreadsheet reads as the start of a formula in a cell (OWASP's CSV injection list).
_FORMULA = ("=", "+", "-", "@", "\t", "\r")
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
    text = str(text)
    for source in (text, *sys.argv):
        for userinfo in _CREDENTIALS.findall(source):
            _SECRETS.update(part for piece in userinfo.split(":") for part in (piece, unquote(piece)) if len(part) >= 4)
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _USERINFO.sub(r"\1***@", text)
    return _SECRET_QUERY.sub(r"\1***", text)


def clean(text: object) -> str:
    """``text`` as vitlit prints it: credentials redacted, escapes shown, on one line, cut at `LONGEST_LINE`."""
    line = shown(redacted(text))
    return line if len(line) <= LONGEST_LINE else f"{line[:LONGEST_LINE]}... ({len(line) - LONGEST_LINE:,} more)"


def say(line: object, error: bool = False) -> None:
    """Print one of vitlit's lines (to the standard error where ``error``), through `clean`."""
    print(clean(line), file=sys.stderr if error else sys.stdout, flush=True)


def cell(text: object, path: bool = False) -> str:
    """``text`` as a CSV cell a spreadsheet shows as text: escapes shown, and a formula's first character quoted.

    OWASP's advice for CSV injection: a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return
    gets a leading ``'``, so ``=HYPERLINK(...)`` or ``-2+3`` is shown, never evaluated. A ``path`` keeps what names
    its file byte for byte (a newline, which CSV quotes; undecodable bytes, written back as they were) and shows only
    what a terminal acts on (escapes, C1 controls as raw bytes, direction overrides).
    """
    value = _IN_PATH.sub(lambda m: ascii(m.group())[1:-1], str(text)) if path else shown(text)
    return f"'{value}" if str(text).startswith(_FORMULA) else value
