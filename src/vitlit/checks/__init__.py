"""Checks of hostile input (opt-in part): config files, jsonargparse's reports, paths and disks, in one line each.

The core reports its own `vitlit.errors.ConfigError` and jsonargparse's reports in one line; this part adds what
the hostile trials asked for: config files that are empty, oversized, not YAML or alias bombs (refused before
jsonargparse would wait on a pipe or expand them for minutes), a value out of range named with its key, the nearest
flag to a mistyped one, a configured class whose constructor refused its arguments, a path the system refuses, a
full disk, and a random seed per DDP process. Attached through pyproject.toml's ``vitlit.hooks`` entry points
(`vitlit.checks.hooks`); the core never imports it. Without this folder those cases end in jsonargparse's or
Python's own messages.
"""
