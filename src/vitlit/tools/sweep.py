"""``vitlit sweep``: tune a recipe with Optuna, each trial a vitlit ``fit`` in its own run folder.

    python -m vitlit sweep --config configs/digits.yaml --search configs/sweeps/digits.yaml --n-trials 20

The search space is a YAML file of command-line keys (as after ``--``) and their distributions::

    model.optimizer.init_args.lr: {type: log_uniform, low: 1.0e-4, high: 1.0e-2}
    model.drop_path_rate: {type: uniform, low: 0.0, high: 0.3}
    data.batch_size: {type: int, low: 32, high: 256, log: true}
    data.augment: {type: categorical, choices: [none, trivialaugment]}
    fixed: {data.root: data/digits, trainer.max_epochs: 30}   # the same for every trial

Optuna's TPE sampler proposes the values; its median pruner stops trials whose ``val/acc`` falls behind at the same
epoch (Optuna's Lightning callback, `optuna_integration.PyTorchLightningPruningCallback`). The study lives in a
database: SQLite next to the trials by default, so the same command continues a sweep stopped with Ctrl-C, or any
Optuna storage URL (``--storage postgresql://...``) that several machines share, each running the same command.
At the end the best trial's values are printed as a ``python -m vitlit fit`` command and written as a config
(``best.yaml``) to give after the base config. Needs the ``[sweep]`` extra (Optuna).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import re
import shlex
import sys
import warnings
from pathlib import Path
from typing import Any

import yaml

from vitlit.cli import main
from vitlit.config import NonNegativeInt, PositiveInt, load_yaml
from vitlit.errors import ConfigError
from vitlit.run_dir import check_writable_folder
from vitlit.text import redacted, say, shown

#: A study's name: it names files and a folder inside ``--root`` (``<name>.db``, ``<name>/``), so never a path.
STUDY_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
#: Distribution types of a search space and the keys each takes (besides ``type``).
KINDS = {
    "log_uniform": ("low", "high"),
    "uniform": ("low", "high"),
    "int": ("low", "high", "log", "step"),
    "categorical": ("choices",),
}


def read_space(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Read and check a search space, with one-line errors for what Optuna would only refuse mid-sweep.

    Returns:
        The distributions by key, and the ``fixed`` values every trial gets.

    Raises:
        ConfigError: An unreadable file, a distribution of unknown type or with missing/extra keys, an empty or
            reversed range, a non-positive bound of a log range, a number of the wrong type, no choices.
    """
    if path.exists() and not path.is_file():  # a folder, or a pipe that would wait for a writer forever
        raise ConfigError(f"--search {path} is not a regular file; give a search-space file.")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"--search {path} cannot be read ({type(err).__name__}); give a search-space file.") from None
    space = load_yaml(text, f"--search {path}")
    if not isinstance(space, dict):
        raise ConfigError(f"--search {path} holds no keys; give `option.key: {{type: ..., ...}}` lines.")
    fixed = space.pop("fixed", None) or {}
    if not isinstance(fixed, dict):
        raise ConfigError(f"--search {path}: fixed must map option keys to values, e.g. fixed: {{data.root: data}}.")
    if not space:
        raise ConfigError(f"--search {path} holds no keys; give `option.key: {{type: ..., ...}}` lines.")
    for key, spec in space.items():
        where = f"--search {path}: {key}"
        if not isinstance(spec, dict) or spec.get("type") not in KINDS:
            raise ConfigError(f"{where} needs a type, one of {', '.join(KINDS)}.")
        kind = spec["type"]
        extra = set(spec) - {"type", *KINDS[kind]}
        if extra:
            raise ConfigError(f"{where} ({kind}) does not take {', '.join(sorted(extra))}.")
        if kind == "categorical":
            if not isinstance(spec.get("choices"), list) or not spec["choices"]:
                raise ConfigError(f"{where} needs a non-empty list of choices.")
            continue
        low, high = spec.get("low"), spec.get("high")
        number = int if kind == "int" else (int, float)
        if not all(isinstance(v, number) and not isinstance(v, bool) and math.isfinite(v) for v in (low, high)):
            expected = "integers" if kind == "int" else "finite numbers"
            raise ConfigError(f"{where} needs low and high as {expected}, got low={low!r} high={high!r}.")
        if not low < high:
            raise ConfigError(f"{where} has an empty range, low={low} high={high}; low must be below high.")
        if (kind == "log_uniform" or spec.get("log")) and low <= 0:
            raise ConfigError(f"{where} is a log range, which needs low > 0, got low={low}.")
    return space, fixed


def suggest(trial: Any, space: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The trial's value for every key of ``space`` (Optuna's ``suggest_*``)."""
    values = {}
    for key, spec in space.items():
        kind = spec["type"]
        if kind == "categorical":
            values[key] = trial.suggest_categorical(key, spec["choices"])
        elif kind == "int":
            values[key] = trial.suggest_int(key, spec["low"], spec["high"], step=spec.get("step", 1),
                                            log=bool(spec.get("log", False)))  # fmt: skip
        else:
            values[key] = trial.suggest_float(key, spec["low"], spec["high"], log=kind == "log_uniform")
    return values


def as_flags(values: dict[str, Any]) -> list[str]:
    """``{"a.b": 1}`` -> ``["--a.b", "1"]``, values as YAML scalars (``null``, ``true``, lists) for the CLI."""
    return [arg for key, value in values.items() for arg in (f"--{key}", _scalar(value))]


def _scalar(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...").strip()


def nested(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as a nested config (``model.optimizer.init_args.lr`` -> ``{model: {optimizer: ...}}``)."""
    tree: dict[str, Any] = {}
    for key, value in values.items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return tree


def _check_keys(config: str, space: dict[str, dict[str, Any]], fixed: dict[str, Any]) -> None:
    """Parse the base config with the values each key may take: a key or value the CLI refuses fails here.

    Each parse sets every key at once: its ends, a value between them that is no integer where the distribution
    draws floats (an integer option given ``uniform``), and every choice of a categorical, so that as many parses
    as the longest list of values cover them all.
    """
    probes = {key: list(spec["choices"]) if spec["type"] == "categorical" else
              [spec["low"], spec["high"]] if spec["type"] == "int" else
              [spec["low"], spec["high"], spec["low"] + 0.37 * (spec["high"] - spec["low"])]
              for key, spec in space.items()}  # fmt: skip
    for i in range(max([2, *(len(values) for values in probes.values())])):
        probe = {key: values[i % len(values)] for key, values in probes.items()}
        said, printed = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(said):
                main(["fit", "--config", config, *as_flags({**fixed, **probe}), "--print_config"])
        except SystemExit as stop:
            if stop.code not in (0, None):
                reason = (said.getvalue().strip().splitlines() or ["refused"])[-1].removeprefix("vitlit: error: ")
                raise ConfigError(
                    f"--search: the values {probe} do not fit {config}: {reason} (keys as the command line takes "
                    f"them, e.g. model.optimizer.init_args.lr)"
                ) from None
        _check_one_process(config, (yaml.safe_load(printed.getvalue()) or {}).get("trainer") or {})


def _check_one_process(config: str, trainer: dict[str, Any]) -> None:
    """Refuse a base config that trains in several processes: a trial runs inside this one (Optuna's callback)."""
    strategy = trainer.get("strategy")
    name = str(strategy.get("class_path", "") if isinstance(strategy, dict) else strategy or "").lower()
    devices = trainer.get("devices")
    several = (isinstance(devices, int) and (devices > 1 or devices == -1)) or (
        isinstance(devices, list) and len(devices) > 1
    )
    if any(word in name for word in ("ddp", "fsdp", "deepspeed")) or several or (trainer.get("num_nodes") or 1) > 1:
        raise ConfigError(
            f"{config} trains in several processes (strategy={strategy}, devices={devices}, "
            f"num_nodes={trainer.get('num_nodes')}), but a sweep's trials run in this one; sweep on one device "
            f"(leave out configs/scale/ddp.yaml) and run several sweep commands on one study instead (--storage)."
        )


def _complete(study: Any) -> bool:
    """Whether the study holds a finished trial (Optuna's ``best_trial`` raises without one)."""
    return any(t.state.name == "COMPLETE" for t in study.trials)


def sweep(
    config: str,
    search: str,
    n_trials: PositiveInt = 20,
    storage: str | None = None,
    study_name: str = "vitlit",
    root: str = "sweeps",
    seed: NonNegativeInt = 0,
    prune_after: PositiveInt = 2,
    heartbeat: PositiveInt = 30,
    max_epochs: PositiveInt | None = None,
) -> dict[str, Any]:
    """Tune a recipe with Optuna: trials are vitlit fits, ranked by their best ``val/acc``.

    Args:
        config: The base recipe (a vitlit config file); every trial starts from it.
        search: The search space: a YAML file of ``option.key: {type: log_uniform|uniform|int|categorical, ...}``,
            and optionally ``fixed: {option.key: value, ...}`` for every trial.
        n_trials: Trials the study should hold when this command ends (finished or pruned ones count): a sweep
            that was stopped continues with the rest.
        storage: An Optuna storage URL that several machines may share, e.g. ``postgresql://user@host/db``;
            default: ``sqlite:///<root>/<study_name>.db``.
        study_name: The study's name in the storage; its trials go to ``<root>/<study_name>/trial_NNN``.
        root: Folder of the trials' run folders, the SQLite file and ``<study_name>.best.yaml``.
        seed: Seed of the TPE sampler (each machine of a shared study should use its own).
        prune_after: Epochs every trial trains before the median pruner may stop it (from the third trial on).
        heartbeat: Seconds between a running trial's signs of life in the storage. A trial silent for twice as long
            (its process was killed) is marked failed by the next trial of any machine, so it never stays running.
        max_epochs: Epochs of each trial (``--trainer.max_epochs`` of its fit); default: the recipe's, or the
            search file's ``fixed``.

    Returns:
        The best trial's number, ``val/acc`` and values.
    """
    try:
        import optuna
        from optuna_integration import PyTorchLightningPruningCallback
    except ImportError:
        raise ConfigError('vitlit sweep needs Optuna; pip install -e ".[sweep]"') from None

    if not STUDY_NAME.fullmatch(study_name) or ".." in study_name:
        raise ConfigError(f"--study_name {study_name!r} is not a plain name (letters, digits, _ . -, no ..); it "
                          f"names the study's files inside --root, e.g. --study_name digits-lr.")  # fmt: skip
    space, fixed = read_space(Path(search))
    if not Path(config).is_file():
        raise ConfigError(f"--config {config} does not exist; give the base recipe's config file.")
    _check_keys(config, space, fixed)
    folder = Path(root).expanduser() / study_name
    check_writable_folder(Path(root).expanduser(), "--root")  # the trials' runs go there, with any storage
    if storage is None:
        Path(root).expanduser().mkdir(parents=True, exist_ok=True)  # for the SQLite file
    url = storage or f"sqlite:///{(Path(root).expanduser() / f'{study_name}.db').resolve()}"
    # Optuna marks its heartbeat "experimental" with a warning at every use; it is the documented way to fail the
    # trials of a killed process, and the warning is not the user's to act on.
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    try:
        study = optuna.create_study(
            study_name=study_name,
            # Optuna's heartbeat: a trial whose process was killed (SIGKILL, a lost machine) stops beating and is
            # marked failed by the next trial that starts (optuna.storages.fail_stale_trials).
            storage=optuna.storages.RDBStorage(url, heartbeat_interval=int(heartbeat), grace_period=2 * int(heartbeat)),
            direction="maximize",
            load_if_exists=True,
            sampler=optuna.samplers.TPESampler(seed=seed),
            # Optuna's warmup counts epochs from 0: the pruner may stop a trial after its prune_after-th epoch.
            pruner=optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=int(prune_after) - 1),
        )
    except Exception as err:  # SQLAlchemy's errors for a URL it cannot open (unknown scheme, unwritable file, ...)
        reason = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        raise ConfigError(
            f"--storage {url} cannot be opened ({reason}); give sqlite:///<file>.db in a folder you can write, or a "
            f"database URL Optuna can reach."
        ) from None
    # A study continues only the sweep that made it: the same base config (as read), search space and length.
    text = Path(config).read_text(encoding="utf-8")

    def digest(recipe: Any) -> str:
        return hashlib.sha256(json.dumps(recipe, sort_keys=True, default=str).encode()).hexdigest()

    made = {"config": digest(load_yaml(text, config)), "search": {"space": space, "fixed": fixed},
            "max_epochs": max_epochs}  # fmt: skip
    made = json.loads(json.dumps(made, default=str))  # as the storage keeps it
    held = study.user_attrs.get("vitlit_sweep")
    if held is not None and held.get("config") != made["config"]:
        # A sweep of an earlier vitlit read the same file with PyYAML's own rules (``2e-3`` as text, not a number).
        with contextlib.suppress(ValueError, yaml.YAMLError):  # a date out of range: no earlier sweep read it
            if held.get("config") == digest(yaml.safe_load(text)):
                held = {**held, "config": made["config"]}
                study.set_user_attr("vitlit_sweep", held)  # recorded as this vitlit reads it from now on
    if held is None:  # a new study (or one of an earlier vitlit, which recorded nothing)
        study.set_user_attr("vitlit_sweep", made)
    elif held != made:
        other = next(key for key in made if held.get(key) != made[key])
        what = {"config": "base config", "search": "search space", "max_epochs": "--max_epochs"}[other]
        raise ConfigError(f"--study_name {study_name} in {redacted(url)} holds a sweep of another {what}; give "
                          f"another --study_name for this one, or continue that sweep with its own.")  # fmt: skip
    optuna.storages.fail_stale_trials(study)  # those of a sweep killed since, at once rather than at the next trial
    folder.mkdir(parents=True, exist_ok=True)
    done_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)

    # The trials' length goes into the best command and file too: the values were tuned for a schedule of this length.
    length = {} if max_epochs is None else {"trainer.max_epochs": int(max_epochs)}

    def objective(trial: optuna.Trial) -> float:
        values = suggest(trial, space)
        run_root = folder / f"trial_{trial.number:03d}"
        trial.set_user_attr("run_root", str(run_root))
        args = ["fit", "--config", config, *as_flags({**fixed, **length, **values}),
                "--trainer.default_root_dir", str(run_root)]  # fmt: skip
        try:
            cli = main(args, callbacks=[PyTorchLightningPruningCallback(trial, monitor="val/acc")])
        except SystemExit as stop:
            if stop.code in (130, 143):  # Ctrl-C or SIGTERM stopped the trial's fit: stop the sweep too
                raise KeyboardInterrupt from None
            raise RuntimeError(f"trial {trial.number}'s fit exited with status {stop.code}") from None
        score = cli.trainer.checkpoint_callback.best_model_score
        if score is None or not math.isfinite(float(score)):
            raise RuntimeError(f"trial {trial.number} recorded no val/acc")
        return float(score)

    remaining = n_trials - sum(t.state in done_states for t in study.trials)
    durations: list[float] = []

    def report(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """A line per ended trial: its outcome, the best so far, and an ETA from this process's trials."""
        seconds = (trial.datetime_complete - trial.datetime_start).total_seconds()
        durations.append(seconds)
        done = sum(t.state in done_states for t in study.trials)
        if trial.state == optuna.trial.TrialState.COMPLETE:
            outcome = f"val/acc {trial.value:.4f}"
        elif trial.state == optuna.trial.TrialState.PRUNED:
            outcome = f"pruned after {len(trial.intermediate_values)} epochs"
        else:
            outcome = "failed"
        line = f"vitlit: trial {trial.number} ({done} of {n_trials}): {outcome} in {seconds:.0f} s"
        if _complete(study):
            line += f"; best val/acc {study.best_value:.4f} (trial {study.best_trial.number})"
        if done < n_trials:
            line += f"; ETA {sum(durations) / len(durations) * (n_trials - done) / 60:.1f} min"
        print(line, file=sys.stderr, flush=True)

    if remaining > 0:
        print(f"vitlit: sweep {study_name}: {n_trials - remaining} of {n_trials} trials done; running {remaining}",
              file=sys.stderr)  # fmt: skip
        try:
            # Optuna's MaxTrialsCallback stops this process once the study holds n_trials, whichever machine ran them
            # (several sweep commands share one study); a trial another machine is running still ends.
            enough = optuna.study.MaxTrialsCallback(n_trials, states=done_states)
            study.optimize(objective, n_trials=remaining, catch=(RuntimeError,), callbacks=[report, enough])
        except KeyboardInterrupt:
            print(f"vitlit: sweep interrupted; the same command continues it ({redacted(url)})", file=sys.stderr)
            raise SystemExit(130) from None
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not complete:
        raise ConfigError(f"no trial of sweep {study_name} finished; see the trials' output above.")
    best = study.best_trial
    best_file = Path(root).expanduser() / f"{study_name}.best.yaml"
    fixed_flags = shlex.join(as_flags(fixed))
    # The tuned values only: the search file's `fixed` ones are command-line flags (some, like callbacks+, have no
    # YAML form), so the command below repeats them.
    best_file.write_text(  # a comment line holds no newline: shown() writes it as an escape
        f"# Best trial {best.number} of sweep {study_name}: val/acc {best.value:.4f}. Give it after the base config:\n"
        f"#   {shown(shlex.join(['python', '-m', 'vitlit', 'fit', '--config', config, '--config', str(best_file)]))} "
        f"{shown(fixed_flags)}\n" + yaml.safe_dump(nested({**length, **best.params})),
        encoding="utf-8",
    )
    flags = as_flags({**fixed, **length, **best.params})
    command = shlex.join(["python", "-m", "vitlit", "fit", "--config", config, *flags])
    # Through `say`, as every vitlit line: a URL's credentials in the search file's values are masked there.
    say(f"best trial {best.number}: val/acc {best.value:.4f}")
    say(command)
    say(f"(also as a config: --config {config} --config {best_file})")
    return {"number": best.number, "value": best.value, "params": best.params, "best_config": str(best_file)}
