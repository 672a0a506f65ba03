"""Text vitlit did not write (file and class names, values read from files, URLs) made safe where it goes.

A file or class name can hold anything but ``/`` and NUL: terminal escapes that retitle or clear the terminal,
newlines that forge log lines or YAML keys, right-to-left overrides that reverse what a reader sees, Markdown and
HTML. Each destination gets its own form: `shown` for terminals and line-based files, `markdown` for Markdown,
`vitlit.runs.prediction_table.cell` for a spreadsheet's cell; each masks the credentials of URLs (`redacted`).
Formats with their own quoting (JSON, YAML written by a YAML library) need no escapes, but a whole file of them (a
run's config, its card) goes through `redacted` too.

Every line vitlit prints leaves through `clean`: `say` prints vitlit's lines, and the command line's log filter
(`vitlit.runtime.quiet`) cleans Lightning's and vitlit's own ``rank_zero_info``: escapes shown, credentials redacted
wherever they stand, a library's quoted message included.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from urllib.parse import unquote

#: What a terminal or an editor acts on instead of showing: C0 and C1 controls (escapes, newlines, carriage
#: returns, tabs), DEL, the bidirectional and zero-width format characters, line/paragraph separators, and lone
#: surrogates (the undecodable bytes of a non-UTF-8 name).
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
#: Characters Markdown or HTML would read as syntax inside a line (emphasis, links, code, tables, HTML, math).
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&$#])")
#: A URL's user-info (``scheme://user:password@host``, or a token as the user), up to the authority's last ``@``: a
#: password may hold an ``@`` of its own (``postgresql://alice:p@ss@host/db``).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/?#\s\"'<>]*)@")
#: Query parameters that carry a credential or a signature, by their name (``token``, ``X-Amz-Security-Token``,
#: ``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Goog-Signature``, Azure's ``sig``, ``api_key``, ``password``, ...).
_SECRET_QUERY = re.compile(
    r"(?i)([?&;][\w.\-]*(?:token|sig|secret|passw|pwd|credential|key|auth)[\w.\-]*=)([^&;#\s\"'<>]*)"
)
#: The credentials seen in URLs (this process's arguments, or text passed to `redacted`): a library that quotes them
#: without the URL around them (a cloud client's "invalid key KEY", a bucket name with the key in it) has them
#: redacted too.
_SECRETS: set[str] = set()
#: A line longer than this is cut in what vitlit prints: a class name of a megabyte is not a message.
LONGEST_LINE = 2000


def shown(text: object) -> str:
    r"""``text`` on one line, each character a terminal acts on as its Python escape (``\x1b``), credentials masked.

    The credentials of URLs are left out by `redacted`.
    """
    return _ACTIVE.sub(lambda m: ascii(m.group())[1:-1], redacted(text))


def markdown(text: object) -> str:
    """``text`` as literal running text in Markdown (and the HTML it may hold).

    `shown`, then every syntax character backslash-escaped: a class named ``<img src=x>`` or ``# h`` reads as written.
    """
    return _MARKDOWN.sub(r"\\\1", shown(text))


def learn_secrets(texts: Iterable[object]) -> None:
    """Remember the credentials of every URL in ``texts`` (the command's arguments), to redact them wherever quoted."""
    for text in texts:
        for userinfo in (match.group(2) for match in _USERINFO.finditer(str(text))):
            _SECRETS.update(part for piece in userinfo.split(":") for part in (piece, unquote(piece)) if len(part) >= 4)
        _SECRETS.update(v for m in _SECRET_QUERY.finditer(str(text)) for v in (m.group(2), unquote(m.group(2)))
                        if len(v) >= 4)  # fmt: skip


def redacted(text: object) -> str:
    """``text`` with every URL's credentials as ``***``: user-info, signed or secret query values, those seen before.

    A credential seen in a URL before (`learn_secrets`) is masked wherever it stands. The one masker of URLs: every
    line vitlit prints (`clean`), every text field it writes (`shown`, `markdown`, a CSV's cells) and every whole
    file of text (a run's config, its card) goes through it. Error lines and logs are read and pasted by others, and
    a model card is published.
    """
    text = str(text)
    learn_secrets((text, *sys.argv))
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, "***")
    text = _USERINFO.sub(r"\1***@", text)
    return _SECRET_QUERY.sub(r"\1***", text)


def clean(text: object) -> str:
    """``text`` as vitlit prints it: credentials redacted, escapes shown, on one line, cut at `LONGEST_LINE`."""
    line = shown(text)
    return line if len(line) <= LONGEST_LINE else f"{line[:LONGEST_LINE]}... ({len(line) - LONGEST_LINE:,} more)"


def say(line: object, error: bool = False) -> None:
    """Print one of vitlit's lines (to the standard error where ``error``), through `clean`."""
    print(clean(line), file=sys.stderr if error else sys.stdout, flush=True)
