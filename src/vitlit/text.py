"""Text vitlit did not write (file and class names, values read from files, URLs) made safe where it goes.

A file or class name can hold anything but ``/`` and NUL: terminal escapes that retitle or clear the terminal,
newlines that forge log lines or YAML keys, right-to-left overrides that reverse what a reader sees, Markdown and
HTML. Each destination gets its own form: `shown` for terminals and line-based files, `markdown` for Markdown,
`vitlit.runs.prediction_table.cell` for a spreadsheet's cell; each masks the credentials of URLs (`redacted`).
Formats with their own quoting (JSON, YAML written by a YAML library) need no escapes, but a whole file of them (a
run's config, its card) goes through `redacted` too.

Every line vitlit prints leaves through `clean`: `say` prints vitlit's lines, and the command line's log filter
(`vitlit.cli.quiet`) cleans Lightning's and vitlit's own ``rank_zero_info``: escapes shown, credentials redacted,
a library's quoted message included.

What is masked is the URL's credential (its user-info, its secret query values), never a word: a password ``model``
must not turn every ``model`` of a saved config into ``***``, nor a user name the folder of the same name in a path.
A credential seen in a URL of the command line is masked without its URL (a cloud client's "invalid key KEY") only
in printed lines, only where it cannot be a word (`learn_secrets`), and only as a whole token.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterable
from typing import TextIO
from urllib.parse import unquote

#: What a terminal or an editor acts on instead of showing: C0 and C1 controls (escapes, newlines, carriage
#: returns, tabs), DEL, the bidirectional and zero-width format characters, line/paragraph separators, and lone
#: surrogates (the undecodable bytes of a non-UTF-8 name).
_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ud800-\udfff]")
#: Characters Markdown or HTML would read as syntax inside a line (emphasis, links, code, tables, HTML, math).
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~&$#])")
#: A URL's user-info (``scheme://user:password@host``, or a token as the user), up to the authority's last ``@``: a
#: password may hold an ``@`` of its own (``postgresql://alice:p@ss@host/db``). Also where a path's normalisation
#: made ``//`` one ``/`` (``Path("http://u:pw@h")`` is ``http:/u:pw@h``); a scheme of one letter there is a drive.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://|[a-z][a-z0-9+.\-]+:/)([^/?#\s\"'<>]*)@")
#: Query parameters that carry a credential or a signature, by their name (``token``, ``X-Amz-Security-Token``,
#: ``X-Amz-Signature``, ``X-Amz-Credential``, ``X-Goog-Signature``, Azure's ``sig``, ``api_key``, ``password``, ...).
_SECRET_QUERY = re.compile(
    r"(?i)([?&;][\w.\-]*(?:token|sig|secret|passw|pwd|credential|key|auth)[\w.\-]*=)([^&;#\s\"'<>]*)"
)
#: The credentials seen in URLs (this process's arguments, or printed text): a library that quotes them without the
#: URL around them (a cloud client's "invalid key KEY", a bucket name with the key in it) has them masked in what
#: vitlit prints. Only those that cannot be words: 8 characters or more, and not letters of one word or a few joined
#: by ``.``, ``_`` or ``-`` (``model``, ``alice``, ``john.smith`` stay; ``AKIA...``, ``Sup3rSecret`` are masked).
_SECRETS: set[str] = set()
_MIN_SECRET = 8
_WORDS = re.compile(r"[A-Za-z][a-z]*(?:[._\-][A-Za-z][a-z]*)*")
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
    """Remember the credentials of the URLs in ``texts`` (the command's arguments) that cannot be words.

    Printed lines (`clean`) mask them wherever a library quotes them without their URL.
    """
    for text in map(str, texts):
        found = [piece for m in _USERINFO.finditer(text) for piece in m.group(2).split(":")]
        found += [m.group(2) for m in _SECRET_QUERY.finditer(text)]
        _SECRETS.update(part for piece in found for part in (piece, unquote(piece)) if _not_a_word(part))


def _not_a_word(part: str) -> bool:
    return len(part) >= _MIN_SECRET and not _WORDS.fullmatch(part)


def redacted(text: object, learned: bool = False) -> str:
    """``text`` with the credentials of every URL as ``***``: its user-info, its signed or secret query values.

    The one masker of URLs: every line vitlit prints (`clean`), every text field it writes (`shown`, `markdown`, a
    CSV's cells) and every whole file of text (a run's config, its card) goes through it. Error lines and logs are
    read and pasted by others, and a model card is published. Only the URL is touched: what a parser reads back (a
    config dumped and loaded again) keeps every other word.

    Args:
        text: The text.
        learned: Also mask the credentials seen in URLs before (`learn_secrets`, the command's arguments included)
            where they stand alone, as whole tokens: for printed text only, never for a file or a value read back.
    """
    text = str(text)
    if learned:
        learn_secrets((text, *sys.argv))
        if _SECRETS:
            alone = "|".join(re.escape(secret) for secret in sorted(_SECRETS, key=len, reverse=True))
            text = re.sub(rf"(?<!\w)(?:{alone})(?!\w)", "***", text)
    text = _USERINFO.sub(r"\1***@", text)
    return _SECRET_QUERY.sub(r"\1***", text)


def clean(text: object) -> str:
    """``text`` as vitlit prints it: credentials redacted, escapes shown, on one line, cut at `LONGEST_LINE`.

    A credential of a URL of the command line is masked here even where a library quoted it alone (`redacted`).
    """
    line = shown(redacted(text, learned=True))
    return line if len(line) <= LONGEST_LINE else f"{line[:LONGEST_LINE]}... ({len(line) - LONGEST_LINE:,} more)"


def say(line: object, error: bool = False) -> None:
    """Print one of vitlit's lines (to the standard error where ``error``), through `clean`."""
    print(clean(line), file=sys.stderr if error else sys.stdout, flush=True)


def shell_word(path: object) -> str:
    """``path`` as one word of a command to paste into this system's shell: POSIX quoting, or Windows' double quotes.

    A path with a space was two words; Windows' ``cmd.exe`` takes POSIX single quotes as part of the name.
    """
    text = str(path)
    return subprocess.list2cmdline([text]) if os.name == "nt" else shlex.quote(text)


def quoted(err: BaseException, longest: int = 200) -> str:
    """A library's exception in a few words on one line (its type and message), its credentials masked.

    What a library raises may quote a URL, a token or a bucket name with a key in it: it reaches a vitlit line only
    as this.
    """
    words = " ".join(str(err).split())
    words = words if len(words) <= longest else f"{words[:longest]}..."
    return redacted(f"{type(err).__name__}: {words}" if words else type(err).__name__)


# The standard streams, whose reader can go away: a pipe's (``vitlit fit | head``) or a closed terminal's (EIO).
# A write to either then fails, and so would every line after and Python's flush at exit: the stream is pointed at
# the null device instead, and what stops the run is said in its run card.


def stream_gone(stream: TextIO | None = None) -> None:
    """Point ``stream`` (the standard output) at the null device, its reader being gone."""
    with contextlib.suppress(OSError, ValueError):  # ValueError: a stream without a descriptor (a test's capture)
        os.dup2(os.open(os.devnull, os.O_WRONLY), (stream or sys.stdout).fileno())


def tell(*lines: str) -> None:
    """Print ``lines`` to the standard error, each through `clean`; nowhere once a terminal is gone."""
    try:
        for line in lines:
            print(clean(line), file=sys.stderr, flush=True)
    except OSError:
        stream_gone(sys.stderr)
