"""Tools (opt-in part): ``vitlit export``, ``serve``, ``sweep`` and ``env``, and attention maps for notebooks.

The subcommands are the functions `vitlit.cli.TOOLS` names; `vitlit.cli` runs them.
"""
