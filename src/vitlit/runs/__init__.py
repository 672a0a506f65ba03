"""Run operations (opt-in part): callbacks and a checkpoint plugin that `vitlit/defaults.yaml` lists by name.

Atomic checkpoint saves, exact resume, the NaN/inf guard, the progress display, speed figures, the run card and
``predictions.csv``; the DDP stop-together callback (`vitlit.runs.ddp`, in ``configs/scale/ddp.yaml``), periodic
snapshots (`vitlit.runs.snapshots`) and weight histograms (`vitlit.runs.histograms`) when a config names them. The
core never imports this part: delete the folder and its lines in ``defaults.yaml``, and runs keep Lightning's own
behaviour. ``logs.py``, ``predictions.py``, ``run_card.py`` and ``resume.py`` only name the classes that moved to
``records.py`` and ``checkpoint_io.py``, for configs saved before.
"""
