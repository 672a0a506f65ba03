"""Hostile round 8 (issue 73): what a run writes and where, and what it masks, one test per class.

The masker masks a URL's credentials, never words (`vitlit.text.redacted`), and never inside the parser's own
dump-and-reload; the folder a run writes is checked against the data root with its links resolved
(`vitlit.config.written_folders`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from helpers.cli import DIGITS_CONFIG, ROOT, carries, refused, run_cli, tree_digest

SHORT = ["--trainer.max_steps", "1", "--trainer.limit_val_batches", "1"]


def test_a_password_that_is_a_word_is_masked_in_its_url_only(
    digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The password ``model`` became ``***`` in every ``model_name`` of jsonargparse's dump-and-reload (a YAML
    "ScannerError: while scanning an alias"); a user name that also named a folder was masked in the saved config."""
    url = "http://alicehostile:model@h/x"
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", digits_dir, "--data.predict_dir", url,
                   "--trainer.default_root_dir", tmp_path / "runs", *SHORT)  # fmt: skip
    carries(line, "predict_dir", "***@h/x")  # the data module's own refusal of a URL, not the parser's YAML error
    assert "ScannerError" not in line and "model@" not in line, line
    root = tmp_path / "alicehostile" / "digits"  # --print_config shows what the run saves as its config.yaml
    with pytest.raises(SystemExit):
        run_cli("fit", "--config", DIGITS_CONFIG, "--data.root", root, "--data.predict_dir", url, "--print_config")
    saved = yaml.safe_load(capsys.readouterr().out)
    data, model = saved["data"]["init_args"], saved["model"]["init_args"]
    assert data["root"] == str(root) and data["predict_dir"] == "http://***@h/x" and model["model_name"] == "test_vit"


def test_a_learned_credential_is_masked_alone_only_in_printed_lines_as_a_whole_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key quoted by a library without its URL is still masked where vitlit prints it; a word never is."""
    from vitlit.text import clean, redacted

    monkeypatch.setattr(sys, "argv", ["vitlit", "fit", "--data.input_dir", "s3://AKIAHOSTILE9:Sup3rS3cret8@b/x",
                                      "--data.predict_dir", "https://john.smith:password@h/y"])  # fmt: skip
    assert clean("key AKIAHOSTILE9 (secret Sup3rS3cret8) denied") == "key *** (secret ***) denied"
    assert clean("the model of john.smith in /home/john.smith: password") == (
        "the model of john.smith in /home/john.smith: password"
    )
    assert clean("xAKIAHOSTILE9 and Sup3rS3cret8x") == "xAKIAHOSTILE9 and Sup3rS3cret8x"  # whole tokens only
    assert redacted("root: /data/AKIAHOSTILE9\n") == "root: /data/AKIAHOSTILE9\n"  # a file keeps its words
    assert clean("cannot read http:/u:model@h/x") == "cannot read http:/***@h/x"  # a URL a Path made one slash of


@pytest.mark.parametrize("how", ["lightning_logs linked", "logger's save_dir linked"])
def test_a_run_folder_linked_into_the_data_root_is_refused(
    how: str, digits_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """default_root_dir's lightning_logs a link to a class folder: config, events and checkpoints went inside it."""
    flat = tmp_path / "flat"
    shutil.copytree(digits_dir / "train", flat)
    before = tree_digest(flat)
    runs = tmp_path / "runs"
    runs.mkdir()
    if how == "lightning_logs linked":
        (runs / "lightning_logs").symlink_to(flat / "3", target_is_directory=True)
        logger: list[object] = []
    else:
        (runs / "tb").symlink_to(flat / "3", target_is_directory=True)
        logger = ["--trainer.logger", "TensorBoardLogger", "--trainer.logger.save_dir", runs / "tb"]
    line = refused(capsys, "fit", "--config", DIGITS_CONFIG, "--data.root", flat, *logger,
                   "--trainer.default_root_dir", runs, *SHORT)  # fmt: skip
    carries(line, f"--trainer.default_root_dir {runs}", flat / "3", "is inside --data.root")
    assert tree_digest(flat) == before and sorted(p.name for p in (flat / "3").iterdir()) == sorted(
        p.name for p in (digits_dir / "train" / "3").iterdir()
    )


#: A config saved by 0.5, with its user's comments, a class of the user's own and a folder named like an old path.
CONFIG_0_5 = """# lightning.pytorch==2.6.6
# the shared recipe of our lab: edit with care
trainer:
  callbacks:
  - class_path: my.vitlit.data.BatchAugment  # our own class, in our package my.vitlit
model:
  class_path: vitlit.model.ViTClassifier
data:
  class_path: vitlit.data.ImageFolderDataModule
  init_args:
    root: /data/vitlit.data.BatchAugment/x  # a folder, not a class
    on_device: true   # fast enough on our GPUs
    batch_augment:
      class_path: vitlit.fast.batch_augment.BatchAugment
"""


def _upgrade_config() -> object:
    sys.path.insert(0, str(ROOT / "scripts"))
    import upgrade_config

    return upgrade_config


def test_upgrade_config_upgrades_a_linked_config_where_it_points_keeping_its_comments_and_other_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A linked config became a regular file (the shared one not upgraded), every comment went without a word, and
    ``vitlit.data.BatchAugment`` was rewritten inside a user's class path and inside a folder's name."""
    shared, run = tmp_path / "shared" / "recipe.yaml", tmp_path / "run" / "config.yaml"
    shared.parent.mkdir()
    run.parent.mkdir()
    shared.write_text(CONFIG_0_5)
    shared.chmod(0o640)
    run.symlink_to(shared)
    _upgrade_config().main([str(run)])
    said = capsys.readouterr().out
    carries(said.strip(), run, "upgraded", shared, shared.with_name("recipe.yaml.old"))
    assert run.is_symlink() and run.resolve() == shared and not run.with_name("config.yaml.old").exists()
    text = shared.read_text()
    assert text == (CONFIG_0_5.replace("on_device: true", "source: memory")
                    .replace("vitlit.fast.batch_augment.", "vitlit.regularize.batch_augment.")), text  # fmt: skip
    assert shared.with_name("recipe.yaml.old").read_text() == CONFIG_0_5
    assert {oct(p.stat().st_mode & 0o777) for p in shared.parent.iterdir()} == {"0o640"}  # a private file stays so


def test_upgrade_config_says_what_it_cannot_keep_and_how_it_is_called(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With no arguments it exited 0 silently; a file rewritten whole lost its comments without a word."""
    upgrade_config = _upgrade_config()
    with pytest.raises(SystemExit) as stop:
        upgrade_config.main([])
    assert stop.value.code == 2 and "usage: python scripts/upgrade_config.py CONFIG.yaml" in capsys.readouterr().err
    old = tmp_path / "config.yaml"
    shutil.copy(ROOT / "tests" / "data" / "config_v0.1.yaml", old)  # 0.1's model section: written anew
    upgrade_config.main([str(old)])
    carries(capsys.readouterr().out.strip(), "config.yaml.old", "comments")
    (tmp_path / "other.yaml").hardlink_to(old.with_name("config.yaml.old"))
    with pytest.raises(SystemExit) as stop:
        upgrade_config.main([str(tmp_path / "other.yaml")])
    assert stop.value.code == 2 and "hard link" in capsys.readouterr().err


def test_a_folder_whose_file_system_cannot_lock_is_not_called_in_use(tmp_path: Path, monkeypatch) -> None:
    # NFS without a lock daemon answers flock with ENOLCK: no fit holds the folder, so none may be named as its owner.
    import errno
    import fcntl

    from vitlit import run_dir
    from vitlit.errors import ConfigError

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with pytest.raises(ConfigError) as refused:
        run_dir.lock(tmp_path)
    assert "cannot be locked" in str(refused.value) and "in use" not in str(refused.value)
    assert "--trainer.default_root_dir" in str(refused.value)
