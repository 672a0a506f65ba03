"""`RunFolders`: the callback that puts every fit, validate, test and predict into its own, never-overwritten folder.

Listed in this part's shared defaults (``runs/defaults.yaml``), so every command of the CLI has it; the core knows
nothing of it. Without it, runs go where Lightning's logger puts them (``lightning_logs/version_N``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from lightning.pytorch import Callback, LightningModule, Trainer
from lightning.pytorch.loggers import TensorBoardLogger

from vitlit.config import user_error
from vitlit.runs.folders import RunFolder, another_root, config_saver, logger_root, place_run, relocated_logger


class RunFolders(Callback):
    """Choose and create each run's folder before it starts, and give the logger, checkpoints and config that folder.

    `vitlit.runs.folders.place_run` says where:

    - a new ``fit`` gets the next free ``version_N``, created atomically, locked while it trains;
    - a ``fit`` from a run's checkpoint continues that run (its config saved as ``config.resume-K.yaml``);
    - ``validate``/``test``/``predict`` of a run's checkpoint write into ``<run>/<subcommand>/version_K``, unless
      ``--trainer.default_root_dir`` names another folder than the run was trained in.

    The vitlit CLI calls `before_run` (a hook of its own: Lightning creates the logger's folder before any callback
    hook runs). A run that a user error stops before it trained anything leaves the folders as they were. Under DDP
    only the
    main process places the run; Lightning sends its folders to the others.
    """

    def __init__(self) -> None:
        self.folder: RunFolder | None = None
        self._started = time.time()
        self._user_error = False

    def before_run(self, trainer: Trainer, pl_module: LightningModule, stage: str, ckpt: Path | None) -> None:
        """Place the run; the CLI calls this once the checkpoint is checked, before Lightning's logger writes."""
        if trainer.loggers and logger_root(trainer.loggers[0]) is None:
            # MLflow, W&B and the like keep no folder of ours (MLflow with a database: none at all), but the config,
            # checkpoints and run card need one: a TensorBoardLogger gives the run its folder, in front of them.
            folder = TensorBoardLogger(save_dir=trainer.default_root_dir)
            trainer.loggers = [folder, *trainer.loggers]
        if logger_root(trainer.logger) is None or not trainer.is_global_zero:  # no logger: Lightning's own folder
            return
        self._started = time.time()
        beside_run = stage == "fit" or ckpt is None or not another_root(trainer.default_root_dir, ckpt)
        save_dir, name = Path(trainer.logger.save_dir), trainer.logger.name
        self.folder = place_run(save_dir, name, stage, ckpt if beside_run else None)
        if self.folder.note:
            print(f"vitlit: {self.folder.note}", file=sys.stderr)
        saver = config_saver(trainer)
        if saver is not None and self.folder.config_name:
            saver.config_filename = self.folder.config_name  # never overwrite the run's config.yaml
        spec = saver.config.get("trainer", {}).get("logger") if saver is not None else None
        spec = spec[0] if isinstance(spec, list) and spec else spec  # a list: the first logger holds the folder
        configured = hasattr(spec, "get") and str(spec.get("class_path")).endswith(type(trainer.logger).__name__)
        init_args = dict(spec.get("init_args") or {}) if configured else {}  # not the one put in front above
        # Lightning's loggers take their folder in the constructor only, and the config must stay as the user wrote
        # it (it is saved with the run and used to resume): the logger is built again, into the chosen folder.
        place = self.folder
        relocated = relocated_logger(trainer.logger, init_args, place.save_dir, place.name, place.version)
        trainer.loggers = [relocated, *trainer.loggers[1:]]  # the others (MLflow, W&B) log as they were configured

    def on_exception(self, trainer: Trainer, pl_module: LightningModule, exception: BaseException) -> None:
        self._user_error = user_error(exception) is not None

    def teardown(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        # After every callback's on_exception (the run card writes its outcome into the folder there).
        if self.folder is not None and self._user_error:
            self.folder.undo(self._started, trainer.current_epoch)
        if self.folder is not None:
            self.folder.release()
        self._user_error = False

    def config_name(self) -> str:
        """The file name the run's config is saved under (``config.yaml``, or ``config.resume-K.yaml``)."""
        return (self.folder.config_name if self.folder is not None else None) or "config.yaml"

    def state_dict(self) -> dict[str, Any]:
        return {}  # where a run goes is decided anew each time; nothing of it belongs in a checkpoint
