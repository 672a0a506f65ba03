"""Config files checked before jsonargparse reads them, and vitlit's one way to read YAML.

jsonargparse reports an empty file or a list only as ``Unexpected config:``, would wait for a pipe's writer
forever, and would expand an alias bomb for minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from vitlit.errors import ConfigError

#: Bounds on a YAML document vitlit reads: a recipe is a few KB and a few hundred values. Anchors and aliases let a
#: few hundred bytes stand for billions of values (9 levels of 10 aliases), which the parser would expand for minutes.
MAX_YAML_BYTES = 1_000_000
MAX_YAML_VALUES = 100_000


def load_yaml(text: str, where: str) -> Any:
    """Parse a YAML document after checking its size with every alias expanded (config files, sweep spaces).

    Raises:
        ConfigError: For a document over `MAX_YAML_BYTES` or over `MAX_YAML_VALUES` values once expanded, or not
            valid YAML.
    """
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{where} holds {len(text):,} characters, more than a config needs ({MAX_YAML_BYTES:,}).")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)  # nodes only: an alias is the same node object again
        if _expanded_size(root, {}) > MAX_YAML_VALUES:
            raise ConfigError(
                f"{where} expands to more than {MAX_YAML_VALUES:,} values through its anchors and aliases (&, *); "
                f"write the values out, or use fewer aliases."
            )
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError(f"{where} is nested deeper than Python's parser goes; a config needs a few levels.") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{where} is not valid YAML{at}; fix it or start from configs/.") from None


def _expanded_size(node: yaml.Node | None, sizes: dict[int, int]) -> int:
    """Values in ``node`` with every alias expanded, counted once per distinct node (linear in the document)."""
    if node is None:
        return 0
    if id(node) not in sizes:
        sizes[id(node)] = 1  # a node that (through an alias) contains itself is refused by the parser later
        children = node.value if isinstance(node.value, list) else []
        flat = [n for child in children for n in (child if isinstance(child, tuple) else (child,))]
        sizes[id(node)] = 1 + sum(_expanded_size(child, sizes) for child in flat)
    return sizes[id(node)]


def check_config_files(argv: list[str]) -> None:
    """Refuse a ``--config`` file (or YAML given inline) that is empty, oversized, not YAML, or not a mapping."""
    values = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"]
    values += [arg.split("=", 1)[1] for arg in argv if arg.startswith("--config=")]
    for value in values:
        path = Path(value).expanduser()
        if "\n" in value or value.lstrip().startswith("{"):  # YAML given inline, checked below
            continue
        if not path.exists():
            raise ConfigError(f"config file {value} does not exist; give a YAML file such as configs/digits.yaml.")
        if not path.is_file():  # a folder, or a pipe that would wait for a writer forever
            raise ConfigError(
                f"config file {value} is not a regular file; give a YAML file such as configs/digits.yaml."
            )
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"config file {value} cannot be read ({type(err).__name__}); give a YAML file.") from None
        content = load_yaml(text, f"config file {value}")
        if content is None:
            raise ConfigError(f"config file {value} is empty; give a YAML file of options such as configs/*.yaml.")
        if not isinstance(content, dict):
            raise ConfigError(
                f"config file {value} holds a {type(content).__name__}, not options (key: value lines such as "
                f"'trainer:'); start from a file in configs/."
            )
    for arg in argv:  # YAML typed inline, as a flag's value or a whole --config
        if "&" in arg and "*" in arg:
            load_yaml(arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg, "a command-line value")
