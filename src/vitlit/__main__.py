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
    main()  # its CLI object is not an exit status: the console script exits 0 after a run


if __name__ == "__main__":
    run()
