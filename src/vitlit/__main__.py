"""``python -m vitlit``: `vitlit.cli.main`, except ``--version``, answered without loading torch or Lightning."""

import sys

from vitlit import __version__


def run() -> None:
    """The ``vitlit`` console script and ``python -m vitlit``."""
    if sys.argv[1:] == ["--version"]:
        print(f"vitlit {__version__}")
        return
    try:
        from vitlit.cli import main
    except (ImportError, MemoryError, OSError) as err:  # a broken install, or too little memory to map torch
        line = " ".join(str(err).split())[:200]
        print(
            f"vitlit: error: PyTorch, Lightning or timm could not be loaded ({type(err).__name__}: {line}); check "
            f"the memory this shell allows (ulimit -v) and the install (pip install -e .).",
            file=sys.stderr,
        )
        raise SystemExit(1) from None

    # Help texts made by new parsers (``--data.help CLASS``) name the program after sys.argv[0]: not __main__.py.
    sys.argv[0] = "vitlit"
    try:
        main()  # its CLI object is not an exit status: the console script exits 0 after a run
    except Exception:  # a bug, whose traceback is wanted: without the credentials of a URL a library quoted in it
        import traceback

        from vitlit.text import redacted

        print(redacted(traceback.format_exc(), learned=True), file=sys.stderr, end="")
        raise SystemExit(1) from None


if __name__ == "__main__":
    run()
