"""Tools (opt-in part): ``vitlit export``, ``serve``, ``sweep`` and ``env``, and attention maps for notebooks.

The subcommands are the functions pyproject.toml's ``vitlit.commands`` entry points name.
"""
