"""Every private attribute of Lightning, PyTorch or LitData that vitlit's core reads or writes, in one place.

The runs part keeps its own, used by it alone, in `vitlit.runs.private`; the optimizer step's (GradScaler's flags
for fused optimizers) sit in `vitlit.model`, beside the step's protocol that uses them. Each has no public
equivalent today.
Checked against Lightning 2.5 and 2.6 and PyTorch 2.4 to 2.14; ``tests/test_private.py`` fails, naming the
attribute, if a release renames or removes one, so a version bump shows here first instead of as a silent change in
behaviour.
"""

from __future__ import annotations


def litdata_formats() -> list[str]:
    """The names of every item format LitData can read (its serializers), so that vitlit can refuse all but a few.

    LitData names them only in its private registry ``litdata.streaming.serializers._SERIALIZERS``.
    """
    from litdata.streaming import serializers

    return list(serializers._SERIALIZERS)
