"""The private names of Lightning, PyTorch and LitData that vitlit uses (in `vitlit.private`, `vitlit.runs.private`
and, for the optimizer step, `vitlit.model`) still exist and work."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from vitlit.model import skip_step_if, take_skip_flag, unscales_internally
from vitlit.private import litdata_formats
from vitlit.runs.nonfinite import NonFiniteGuard
from vitlit.runs.private import cap_batch_search, kill_started_processes, set_checkpoint_interval
from vitlit.runs.snapshots import Snapshots


def test_checkpoint_interval_can_be_changed_after_construction() -> None:
    callback = ModelCheckpoint(every_n_train_steps=1)
    assert "_every_n_train_steps" in vars(callback), "Lightning renamed ModelCheckpoint._every_n_train_steps"
    set_checkpoint_interval(callback, 7)
    assert callback._every_n_train_steps == 7


def test_a_batch_size_search_can_be_capped_and_its_loaders_rebuilt() -> None:
    from lightning.pytorch.callbacks import BatchSizeFinder
    from lightning.pytorch.tuner import batch_size_scaling

    finder = BatchSizeFinder(max_val=8192)
    assert "_max_val" in vars(finder), "Lightning renamed BatchSizeFinder._max_val"
    cap_batch_search(finder, 100)
    assert finder._max_val == 100
    assert callable(batch_size_scaling._reset_dataloaders), "Lightning renamed the tuner's _reset_dataloaders"


def test_fused_optimizers_are_recognised_as_unscaling_inside_their_step() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert unscales_internally(torch.optim.AdamW(params, fused=True)), "torch renamed _step_supports_amp_scaling"
    assert not unscales_internally(torch.optim.AdamW(params, foreach=True))


def test_the_state_keys_vitlit_makes_are_those_lightning_made_so_saved_checkpoints_read_back() -> None:
    # Checkpoints written while vitlit asked Lightning's _generate_state_key hold the guard's and snapshots' state
    # under these keys; the callbacks now make them themselves, in the same form.
    guard = NonFiniteGuard(action="skip", max_consecutive_skips=3, check_every_n_steps=7)
    assert guard.state_key == guard._generate_state_key(action="skip", every=7, skips=3)
    assert guard.state_key != NonFiniteGuard().state_key
    snapshots = Snapshots(every_fraction=0.25)
    assert snapshots.state_key == snapshots._generate_state_key(
        snapshots=snapshots.filename, every_fraction=snapshots.every_fraction
    )


def test_a_fused_optimizer_skips_a_flagged_step_on_the_device() -> None:
    param = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([param], lr=0.1, fused=True)
    for skip, expect_change in ((True, False), (False, True)):
        before = param.detach().clone()
        param.grad = torch.ones(3)
        skip_step_if(optimizer, torch.tensor(skip))
        optimizer.step()
        take_skip_flag(optimizer)
        assert "found_inf" not in vars(optimizer) and "grad_scale" not in vars(optimizer)
        assert (not torch.equal(param, before)) == expect_change, "torch's fused step ignored found_inf"


def test_lightnings_launchers_can_pass_a_signal_on() -> None:
    from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher, _SubprocessScriptLauncher

    for launcher in (_MultiProcessingLauncher, _SubprocessScriptLauncher):
        assert callable(getattr(launcher, "kill", None)), f"Lightning removed {launcher.__name__}.kill"
    kill_started_processes(SimpleNamespace(strategy=SimpleNamespace(launcher=None)), 15)  # none started: no-op


def test_no_other_module_touches_a_private_name_of_a_library() -> None:
    # `x._name` on anything but the module's own objects, or `import _name`: for vitlit.private or a part's own.
    import re
    from pathlib import Path

    import vitlit

    own = re.compile(r"\b(self|cls|os)\._")  # os._exit: documented, the way a forked child must end
    private = re.compile(r"\b[A-Za-z]\w*\._[A-Za-z]\w*|\bimport _[A-Za-z]\w*|import \(?[^)\n]*\b_[a-z]\w*")
    found = []
    for path in Path(vitlit.__file__).parent.rglob("*.py"):
        if path.name == "private.py":
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            for match in private.finditer(code):
                if not own.match(match.group(0)) and not code.strip().startswith(('"', "'")):
                    found.append(f"{path.name}:{number}: {match.group(0)}")
    assert not found, found


def test_litdatas_formats_are_listed_and_pickle_is_one_of_them() -> None:
    pytest.importorskip("litdata")
    formats = litdata_formats()
    assert {"pickle", "str", "int", "bytes", "numpy"} <= set(formats), "LitData renamed its _SERIALIZERS registry"
