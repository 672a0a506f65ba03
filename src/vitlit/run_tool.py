"""Run a tool subcommand (`vitlit.cli.TOOLS`): a function whose typed, documented arguments are its flags."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

from jsonargparse import ArgumentParser

from vitlit import config as cfg
from vitlit.errors import ConfigError


def run_tool(name: str, target: str, argv: list[str], parser_class: type[ArgumentParser]) -> Any:
    """Parse ``argv`` as the flags of the function ``target`` names (``vitlit export --help``) and call it.

    Args:
        name: The subcommand as typed after ``vitlit`` (for its usage line).
        target: ``module:function``, the subcommand's entry in `vitlit.cli.TOOLS`.
        argv: The arguments after the subcommand.
        parser_class: The CLI's parser, so that a tool's errors read as the CLI's.
    """
    module, function = target.split(":")
    try:
        run = getattr(importlib.import_module(module), function)
    except ModuleNotFoundError as err:
        if not module.startswith(str(err.name)):  # a package the tool needs, not the tool itself
            raise
        raise ConfigError(f"the {name} subcommand's module {module} is not in this copy of vitlit; restore it or "
                          f"drop {name} from vitlit.cli.TOOLS.") from None  # fmt: skip
    parser = parser_class(prog=f"vitlit {name}", description=(run.__doc__ or name).split("\n\n")[0],
                                  allow_abbrev=False)  # fmt: skip
    parser.add_function_arguments(run, as_group=False)
    if argv and not argv[0].startswith("-"):  # a leading word is the first argument: `vitlit models 'vit_*'`
        argv = [f"--{next(iter(inspect.signature(run).parameters))}", *argv]
    # Options may be spelled with dashes too (--n-trials for --n_trials), as most command-line tools take them.
    argv = [re.sub(r"^--([\w-]+)", lambda m: "--" + m.group(1).replace("-", "_"), a) for a in argv]
    cfg.check_finite_flags(argv)
    return run(**vars(parser.instantiate_classes(parser.parse_args(argv))))  # classes (vitlit prepare --data)
