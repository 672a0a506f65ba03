"""What the user typed, checked before anything runs: config files, values Lightning would take, folders.

The checks here are for what jsonargparse and Lightning would take without a word and then hang on, crash on deep
inside a run, or silently replace. Each raises a `ConfigError`: one line ``vitlit: error: ...``, exit status 2
(`vitlit.exits` says every user error in one line). Last, `absolute_paths` makes the parsed config's relative
paths absolute, so that a saved run config reads the same from any folder.

A range written as a type (`Probability`, `Rate`, `Fraction`, jsonargparse's `PositiveInt` ...) is checked once, by
the parser, with a one-line message that names the key and the value, and ``--help`` shows it; hand-written checks
remain only where several settings must agree. Python callers pass ordinary numbers; the parser passes instances of
these ``int``/``float`` subclasses, which a class stores as plain numbers (`as_builtin`), so that its checkpoints stay
readable.
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import get_loader
from jsonargparse.typing import ClosedUnitInterval, restricted_number_type
from jsonargparse.typing import NonNegativeFloat as NonNegativeFloat  # the parser's own, for typed signatures
from jsonargparse.typing import NonNegativeInt as NonNegativeInt
from jsonargparse.typing import OpenUnitInterval as OpenUnitInterval
from jsonargparse.typing import PositiveFloat as PositiveFloat
from jsonargparse.typing import PositiveInt as PositiveInt

from vitlit.errors import ConfigError

#: The shared settings under every ``--config``: the one list of what a default run does (read it first).
DEFAULTS = Path(__file__).with_name("defaults.yaml")
#: Bounds on a YAML document: a recipe is a few KB. Anchors and aliases let a few hundred bytes stand for billions
#: of values, which the parser would expand for minutes.
MAX_YAML_BYTES, MAX_YAML_VALUES = 1_000_000, 100_000
#: Arguments that name a file or folder, in any data module or model (their ``init_args``, or those of a class given
#: to the model, such as a distillation's teacher); ``teacher`` is a path only where it names an existing file.
PATH_ARGUMENTS = ("root", "data_dir", "predict_dir", "pretrained_file", "teacher_file", "teacher")
#: Arguments whose value is a name (a file, folder or URL), never a number: ``nan`` or ``inf`` there is a name.
NAMED = (*PATH_ARGUMENTS, "path", "input_dir", "cache_dir", "output", "default_root_dir", "ckpt_path", "config")


def as_builtin(value: Any) -> Any:
    """``value`` as a plain ``int``/``float`` if it is a constrained number (e.g. ``PositiveInt(3)``), else as it is.

    The parser hands over instances of these int/float subclasses. Stored in a module, they would travel into the
    hyperparameters and states of every checkpoint, which ``torch.load(weights_only=True)`` then refuses to read; so
    the classes keep plain numbers.
    """
    if isinstance(value, bool) or type(value) in (int, float) or not isinstance(value, (int, float)):
        return value
    return int(value) if isinstance(value, int) else float(value)


#: A probability: 0 to 1, both included.
Probability = ClosedUnitInterval
#: A rate that must stay below 1 (dropout, stochastic depth, label smoothing): 0 included, 1 excluded.
Rate = restricted_number_type("Rate", float, [(">=", 0), ("<", 1)])
#: A share of something that must not be empty: above 0, at most 1 (a layer-decay factor, a fraction of the run).
Fraction = restricted_number_type("Fraction", float, [(">", 0), ("<=", 1)])


def check_config_files(argv: list[str]) -> None:
    """Refuse a config (``--config`` or ``-c``, the shared settings) that would be misread, and non-finite numbers.

    A value that names no file and parses as a YAML mapping is YAML given inline (jsonargparse reads it so), and is
    checked as a file is. A file that is missing, not a regular file (a pipe waits forever), empty or not options is
    refused. No option of a run takes NaN or infinity, and a check ``value < 0`` passes them: they are refused where
    typed.
    """
    for value in [str(DEFAULTS), *config_values(argv)]:
        path = Path(value).expanduser()
        exists = os.path.exists(path)  # False, not an error, for inline YAML too long for a name or holding a NUL
        inline = not exists and _is_mapping(value)  # YAML given inline, as jsonargparse takes it
        if not inline and not (exists and path.is_file()):
            what = "is not a regular file" if exists else "does not exist"
            raise ConfigError(f"config file {value} {what}; give a YAML file such as configs/digits.yaml.")
        where = f"inline config {value}" if inline else f"config file {value}"
        try:
            content = load_yaml(value if inline else path.read_text(), where)
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"{where} cannot be read ({type(err).__name__}); give a YAML file.") from None
        if not isinstance(content, dict):
            what = "is empty" if content is None else f"holds a {type(content).__name__}, not options"
            raise ConfigError(f"{where} {what}; start from a file in configs/.")
        # The Trainer's options are a group: a mapping, or a file or inline YAML that holds one; anything else there
        # (`trainer: 5`, a list of `- key: value`, nothing) replaced the recipe's trainer section with Lightning's
        # defaults, silently.
        if "trainer" in content and not isinstance(content["trainer"], (dict, str)):
            raise ConfigError(f"{where}: trainer holds {str(content['trainer'])[:80]}, not options; write its options "
                              f"under it as key: value lines (max_epochs: 3), or leave trainer out.")  # fmt: skip
        check_finite(content, f"{where}: ")
    # --trainer takes what a file's trainer section holds: a file of options, or options as YAML.
    typed = [arg[10:] for arg in argv if arg.startswith("--trainer=")]
    for value in typed + [value for arg, value in itertools.pairwise(argv) if arg == "--trainer"]:
        path = os.path.expanduser(value)  # os.path.isfile: False, not an error, for YAML too long for a name
        try:
            content = load_yaml(Path(path).read_text() if os.path.isfile(path) else value, "the value of --trainer")
        except (OSError, UnicodeDecodeError):
            content = None
        if not isinstance(content, dict):
            raise ConfigError(f"--trainer {value} is neither a file of trainer options nor options; give them as "
                              f"flags (--trainer.max_epochs 5), or a YAML file of key: value lines.")  # fmt: skip
        check_finite(content, "the value of --trainer: ")
    check_finite_flags(argv)


def config_values(argv: list[str]) -> list[str]:
    """The values of the config flag in ``argv``, in order: ``--config x``, ``--config=x``, ``-c x``, ``-c=x``, ``-cx``.

    Args:
        argv: The command line, without the program name.

    Returns:
        Each value as typed: a path or inline YAML.
    """
    values = []
    for i, arg in enumerate(argv):
        if arg in ("--config", "-c"):
            values += argv[i + 1 : i + 2]  # the parser says that a last --config lacks its value
        elif arg.startswith("--config="):
            values.append(arg.split("=", 1)[1])
        elif arg.startswith("-c") and not arg.startswith("--"):  # argparse reads -c=x and -cx as -c x
            values.append(arg[3:] if arg.startswith("-c=") else arg[2:])
    return values


def _is_mapping(text: str) -> bool:
    """Whether ``text`` parses as a YAML mapping (aliases are not expanded: `load_yaml` bounds them)."""
    try:
        return isinstance(yaml.compose(text, Loader=yaml.SafeLoader), yaml.MappingNode)
    except (yaml.YAMLError, RecursionError):
        return "\n" in text or text.lstrip().startswith("{")  # meant as YAML: `load_yaml` says what is wrong


def load_yaml(text: str, where: str) -> Any:
    """Parse a YAML document within `MAX_YAML_BYTES` and, with every alias expanded, `MAX_YAML_VALUES`."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{where} holds {len(text):,} characters, more than a config needs ({MAX_YAML_BYTES:,}).")
    try:
        root, sizes = yaml.compose(text, Loader=yaml.SafeLoader), {}  # nodes: an alias is the same node again

        def size(node: Any) -> int:  # values below a node, each distinct node counted once: linear in the text
            if id(node) not in sizes:
                sizes[id(node)] = 1  # a node that contains itself is refused by the parser below
                if isinstance(node, yaml.ScalarNode) and "\x00" in node.value:  # "\0" in quotes: no path holds one
                    raise ConfigError(f"{where} holds a NUL byte (\\0) in a value at line {node.start_mark.line + 1}, "
                                      f"which no path or name can hold; remove it.")  # fmt: skip
                if isinstance(node, yaml.MappingNode):  # PyYAML keeps the last of two equal keys, silently
                    keys = [k.value for k, _ in node.value if isinstance(k, yaml.ScalarNode) and k.value != "<<"]
                    if len(set(keys)) < len(keys):
                        twice = next(k for i, k in enumerate(keys) if k in keys[:i])
                        raise ConfigError(
                            f"{where} gives the key {twice!r} twice in one mapping (line "
                            f"{node.start_mark.line + 1}); YAML keeps only the last: write it once."
                        )
                kids = [k for c in node.value for k in (c if isinstance(c, tuple) else (c,))] if isinstance(
                    node.value, list) else []  # fmt: skip
                sizes[id(node)] = 1 + sum(size(k) for k in kids)
            return sizes[id(node)]

        if root is not None and size(root) > MAX_YAML_VALUES:
            raise ConfigError(f"{where} expands to more than {MAX_YAML_VALUES:,} values through its anchors and "
                              f"aliases (&, *); write the values out.")  # fmt: skip
        return get_loader("yaml")(text)  # as the parser reads it (a date-like 2024-02-30 stays text)
    except RecursionError:
        raise ConfigError(f"{where} is nested deeper than Python's parser goes; a config needs a few levels.") from None
    except yaml.YAMLError as err:
        raise invalid_yaml(err, where) from None
    except ConfigError:
        raise
    except ValueError as err:  # the loader's constructors: an integer of over 4,300 digits (Python's limit)
        reason = str(err).split(";")[0][:120]
        raise ConfigError(f"{where} holds a value YAML cannot read ({reason}); quote it to keep it as text, or "
                          f"correct it.") from None  # fmt: skip


def invalid_yaml(err: Exception, where: str) -> ConfigError:
    """The one line for YAML the parser refused: where (its line, or the character it refuses, such as NUL)."""
    mark = getattr(err, "problem_mark", None)
    at = f" at line {mark.line + 1}" if mark is not None else ""
    if hasattr(err, "character") and hasattr(err, "position"):  # a character YAML refuses: which one, and where
        code = ord(err.character) if isinstance(err.character, str) else err.character
        at = f" (the character U+{code:04X} at character {err.position + 1})"
    return ConfigError(f"{where} is not valid YAML{at}; fix it or start from a file in configs/.")


def check_finite(content: Any, where: str, key: str = "") -> None:
    """Refuse a float of ``content`` (a parsed YAML document or run config) that is NaN or infinite, naming its key.

    No option of vitlit takes one. YAML's ``.inf`` and ``.nan`` typed on the command line are read as numbers for a
    number's option only (a folder named ``.inf`` stays a folder), so the parsed config is checked too.
    """
    if isinstance(content, float) and not math.isfinite(content):
        raise ConfigError(f"{where}{key}={content} is not a finite number; give a number such as 0.1.")
    items = content.items() if isinstance(content, dict) else enumerate(content) if isinstance(content, list) else ()
    for name, value in items:
        check_finite(value, where, f"{key}.{name}" if key else str(name))


def check_finite_flags(argv: list[str]) -> None:
    r"""Refuse a flag given NaN or infinity (``--model.optimizer.init_args.lr nan``), which no option of vitlit takes.

    A value whose anchors and aliases (``&``, ``*``) expand past a file's limits is refused too, and so is one whose
    quoted escapes stand for a NUL byte (``"\0"``): the parser reads each value as YAML.
    """
    for i, flag in enumerate(argv):
        value = argv[i + 1] if i + 1 < len(argv) else ""  # a --flag=value may come last
        flag, value = (flag.split("=", 1) if "=" in flag else (flag, value)) if flag.startswith("--") else ("", "")
        named = flag.rsplit(".", 1)[-1].lstrip("-") in NAMED  # a folder called nan is a folder, not a number
        try:
            number = float(value)
        except ValueError:
            number = 0.0  # not a number (YAML's .inf: `check_finite`, once the parser has typed it)
        if not named and not math.isfinite(number):  # nan, inf, 1e400 (read as inf)
            raise ConfigError(f"{flag}={value} is not a finite number; give a number such as 0.1.")
        if ("&" in value and "*" in value) or ("\\" in value and '"' in value and _is_yaml(value)):
            load_yaml(value, f"the value of {flag}")


def _is_yaml(text: str) -> bool:
    """Whether ``text`` parses as YAML (else the parser takes it as a plain string, escapes and all)."""
    try:
        yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return False
    except RecursionError:  # load_yaml says so
        return True
    return True


def absolute_paths(config: Any) -> None:
    """Make the relative paths of a parsed run config absolute, in place: `PATH_ARGUMENTS`, roots and logger folders.

    A run saves its config for resuming, testing and the notebooks, which run from other folders: the Trainer's
    root and its logger's ``save_dir`` are made absolute too.
    """
    for init_args in (config["model"]["init_args"], config["data"]["init_args"]):
        for dotted in list(init_args.keys()) if hasattr(init_args, "keys") else []:  # a class given to a class: a.b.c
            key, value = dotted.rsplit(".", 1)[-1], init_args[dotted]
            if key not in PATH_ARGUMENTS or not isinstance(value, (str, Path)) or "://" in str(value):
                continue
            if Path(value).expanduser().is_absolute() or (key == "teacher" and not Path(value).is_file()):  # a name
                continue
            init_args[dotted] = os.path.abspath(value)  # not resolve(): a symbolic link the user named stays
    root = config["trainer"].get("default_root_dir")
    if isinstance(root, str) and "://" not in root:
        config["trainer"]["default_root_dir"] = os.path.abspath(os.path.expanduser(root))
    loggers = config["trainer"].get("logger")
    for logger in loggers if isinstance(loggers, list) else [loggers]:  # a TensorBoard or CSV logger's own folder
        init_args = logger.get("init_args") if hasattr(logger, "get") else None
        save_dir = init_args.get("save_dir") if hasattr(init_args, "get") else None
        if isinstance(save_dir, str) and "://" not in save_dir:
            init_args["save_dir"] = os.path.abspath(os.path.expanduser(save_dir))
