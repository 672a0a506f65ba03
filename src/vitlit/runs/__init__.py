"""Run operations (opt-in part): run folders, atomic saves, the NaN/inf guard, speed figures, run cards, resume.

Attached through ``runs/defaults.yaml`` (callbacks and a checkpoint plugin), and `RunFolders` through the CLI's
``before_run`` callback hook; the core never imports this part. Also here: the DDP stop-together callback, the
progress bar, ``predictions.csv`` and exact-resume random states.
"""

from vitlit.runs.nonfinite import NonFiniteGuard

__all__ = ["NonFiniteGuard"]
