"""ViTClassifier: timm model creation, local pretrained weights, gradient checkpointing, predictions."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import timm
import torch
from helpers.cli import said_with
from safetensors.torch import save_file

from vitlit import ViTClassifier
from vitlit.errors import ConfigError


@pytest.mark.parametrize("suffix", [".pth", ".safetensors"])
def test_pretrained_file_loads_through_timm_and_adapts_to_32px(
    tmp_path: Path, suffix: str, caplog: pytest.LogCaptureFixture
) -> None:
    # test_vit's own geometry is 160 px, patch 16, 1000 classes: timm must resample patch and position embeddings
    # and drop the head, exactly as it does for hub weights.
    source = timm.create_model("test_vit")
    path = tmp_path / f"weights{suffix}"
    state = {k: v.contiguous() for k, v in source.state_dict().items()}
    save_file(state, path) if suffix == ".safetensors" else torch.save(state, path)

    with caplog.at_level(logging.INFO):
        model = ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(path))
    net = model.net
    said = caplog.text  # issue 36, stumble 14: what was loaded and what adapted
    said_with(said, path, "test_vit", "pos_embed (1, 101, 64) -> (1, 65, 64)", "resampled")
    assert "head.weight (1000, 64) -> (7, 64) (new)" in said
    torch.testing.assert_close(net.blocks[3].mlp.fc1.weight, source.blocks[3].mlp.fc1.weight)
    assert net.patch_embed.proj.weight.shape[-2:] == (4, 4)
    assert net.pos_embed.shape[1] == (32 // 4) ** 2 + 1
    assert net.head.weight.shape == (7, source.embed_dim)
    fresh = ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4)
    assert not torch.equal(fresh.net.blocks[3].mlp.fc1.weight, net.blocks[3].mlp.fc1.weight)


def test_a_pretrained_file_with_this_datas_head_keeps_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A file whose head has the run's class count (a model fine-tuned on this data) is loaded whole.

    timm keeps a pretrained head only where the class count is its pretrained config's (1000), so the head trained on
    these classes was replaced by a new one, and the log said it was new from 1000 rows.
    """
    source = timm.create_model("test_vit", num_classes=7, img_size=32, patch_size=4)
    torch.save(source.state_dict(), tmp_path / "tuned.pth")
    with caplog.at_level(logging.INFO):
        model = ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "tuned.pth")
        )
    for name, value in source.state_dict().items():
        torch.testing.assert_close(model.net.state_dict()[name], value, rtol=0, atol=0)
    said_with(caplog.text, "tuned.pth", "adapted: nothing")
    caplog.clear()
    with caplog.at_level(logging.INFO):  # another class count: a new head, said against the file's own rows
        other = ViTClassifier(
            "test_vit", num_classes=3, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "tuned.pth")
        )
    said_with(caplog.text, "head.weight (7, 64) -> (3, 64) (new)")
    torch.testing.assert_close(other.net.blocks[1].attn.qkv.weight, source.blocks[1].attn.qkv.weight)


def test_a_pretrained_file_of_another_model_is_refused_naming_what_it_lacks_or_holds(tmp_path: Path) -> None:
    """A file sharing a few names with the model (another depth): timm loaded those non-strictly and left every block
    random, and the log said only the head was new (a review's)."""
    weights = {k: v for k, v in timm.create_model("test_vit").state_dict().items() if not k.startswith("blocks.1.")}
    torch.save(weights, tmp_path / "shallower.pth")
    lacks = r"lacks 12 of the model's 78 tensors besides the head, all of blocks\.1, the first blocks\.1\."
    with pytest.raises(ConfigError, match=lacks):
        ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "shallower.pth")
        )
    # A deeper stage of a hierarchical model (Swin's layers.2.blocks.N): its first number is in the file, the blocks
    # after the shallower stage's depth are not (a review's: swin_tiny's file loaded into swin_small).
    swin = {k: v for k, v in timm.create_model("swin_tiny_patch4_window7_224").state_dict().items()
            if not k.startswith("layers.2.blocks.5.")}  # fmt: skip
    torch.save(swin, tmp_path / "swin.pth")
    with pytest.raises(ConfigError, match=r"all of layers\.2\.blocks\.5,"):
        ViTClassifier("swin_tiny_patch4_window7_224", num_classes=7, pretrained_file=str(tmp_path / "swin.pth"))
    # And a deeper stage's file (Swin-S's layers.2.blocks.6 into Swin-T): timm's own converter raised AttributeError.
    swin["layers.2.blocks.6.norm1.weight"] = swin["layers.2.blocks.0.norm1.weight"]
    torch.save(swin, tmp_path / "swin.pth")
    with pytest.raises(ConfigError, match=r"it holds layers\.2\.blocks\.6, which SwinTransformer of this depth"):
        ViTClassifier("swin_tiny_patch4_window7_224", num_classes=7, pretrained_file=str(tmp_path / "swin.pth"))
    # A deeper model's file: timm skipped its extra blocks without a word, and the final norm was the deeper one's.
    depth = len(timm.create_model("test_vit").blocks)
    torch.save(timm.create_model("test_vit", depth=depth + 2).state_dict(), tmp_path / "deeper.pth")
    with pytest.raises(ConfigError, match=rf"it holds blocks\.{depth}, which VisionTransformer of this depth has not"):
        ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "deeper.pth")
        )
    # A pretraining file with parts of its own beside the model's (MAE's decoder_blocks): the encoder is whole.
    mae = {**timm.create_model("test_vit").state_dict(), "decoder_blocks.0.mlp.fc1.weight": torch.zeros(2, 2)}
    torch.save(mae, tmp_path / "mae.pth")
    ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "mae.pth"))
    # A released file in its own layout, whose names timm converts as it loads (DeiT III's gamma_1 for ls1.gamma,
    # DINOv2's register tokens), is no other model's: a few names absent, no part absent whole.
    deit3 = timm.create_model("deit3_small_patch16_224").state_dict()
    torch.save({k.replace("ls1.gamma", "gamma_1"): v for k, v in deit3.items()}, tmp_path / "deit3.pth")
    model = ViTClassifier("deit3_small_patch16_224", num_classes=7, pretrained_file=str(tmp_path / "deit3.pth"))
    torch.testing.assert_close(model.net.blocks[0].ls1.gamma, deit3["blocks.0.ls1.gamma"], rtol=0, atol=0)


def test_a_released_file_in_a_layout_timm_converts_loads_and_a_deeper_one_is_still_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """OpenCLIP keeps a timm ViT under ``visual.trunk.``; timm's loader renames it, so the file is the model's own.

    The check read the names as stored and refused it as another model's: "lacks 78 of the model's 78 tensors".
    """
    source = timm.create_model("test_vit", num_classes=7)  # a released file: the model's own geometry, 160 px
    trunk = {f"visual.trunk.{k}": v for k, v in source.state_dict().items() if not k.startswith("head.")}
    # Its projection becomes the head (timm's converter); with this data's 7 classes, the head is the file's.
    torch.save({**trunk, "visual.head.proj.weight": source.head.weight}, tmp_path / "open_clip.pth")
    with caplog.at_level(logging.INFO):
        model = ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "open_clip.pth")
        )
    for name, value in source.blocks.state_dict().items():
        torch.testing.assert_close(model.net.blocks.state_dict()[name], value, rtol=0, atol=0)
    torch.testing.assert_close(model.net.head.weight, source.head.weight, rtol=0, atol=0)
    # What timm's converter resampled is said against the model's own geometry (the file's, once converted, would
    # show nothing adapted), and the head as the file's (it was said to be new, from timm's 1000 classes).
    line = said_with(caplog.text, "open_clip.pth (converted by timm from its own layout)", "pos_embed (1, 101, 64) -> "
                     "(1, 65, 64) (resampled)")  # fmt: skip
    assert "head" not in line.split("adapted:")[1]
    # At the run's own geometry nothing is resampled, and nothing is said to be (it was, against timm's 160 px).
    caplog.clear()
    small = timm.create_model("test_vit", num_classes=7, img_size=32, patch_size=4).state_dict()
    torch.save({f"visual.trunk.{k}": v for k, v in small.items()}, tmp_path / "open_clip_32.pth")
    with caplog.at_level(logging.INFO):
        ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "open_clip_32.pth")
        )
    said_with(caplog.text, "open_clip_32.pth (converted by timm from its own layout)", "adapted: nothing")
    # I-JEPA keeps the ViT under its encoder, as DataParallel named it: a mapping of mappings, which timm unwraps.
    torch.save({"encoder": {f"module.{k}": v for k, v in source.state_dict().items()}}, tmp_path / "ijepa.pth")
    model = ViTClassifier(
        "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "ijepa.pth")
    )
    torch.testing.assert_close(model.net.blocks[2].mlp.fc1.weight, source.blocks[2].mlp.fc1.weight, rtol=0, atol=0)
    depth = len(source.blocks)  # the same layout of a deeper model: its extra blocks are seen once converted
    deeper = timm.create_model("test_vit", num_classes=7, depth=depth + 1)
    torch.save({f"visual.trunk.{k}": v for k, v in deeper.state_dict().items()}, tmp_path / "deeper.pth")
    with pytest.raises(ConfigError, match=rf"it holds blocks\.{depth}, which VisionTransformer of this depth has not"):
        ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "deeper.pth")
        )


def test_a_pretrained_file_that_is_no_state_dict_is_one_line(tmp_path: Path) -> None:
    """A bare tensor, a list or a damaged .safetensors file ended in words about ViTClassifier's arguments
    (AttributeError, SafetensorError), not naming the file."""
    torch.save(torch.zeros(3), tmp_path / "tensor.pth")
    torch.save([torch.zeros(3)], tmp_path / "list.pth")
    torch.save({"blocks.0.norm1.weight": 3}, tmp_path / "numbers.pth")
    (tmp_path / "damaged.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage" + b"x" * 64)
    for name in ("tensor.pth", "list.pth", "numbers.pth", "damaged.safetensors"):
        with pytest.raises(ConfigError, match=rf"pretrained_file='.*{name}' is not a readable state dict of test_vit"):
            ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / name))


def test_gradient_checkpointing_gives_the_same_gradients() -> None:
    torch.manual_seed(0)
    plain = ViTClassifier("test_vit", img_size=32, patch_size=4, drop_path_rate=0.0)
    ckpt = ViTClassifier("test_vit", img_size=32, patch_size=4, drop_path_rate=0.0, grad_checkpointing=True)
    ckpt.load_state_dict(plain.state_dict())
    assert ckpt.net.grad_checkpointing and not plain.net.grad_checkpointing
    images, targets = torch.randn(4, 3, 32, 32), torch.tensor([0, 1, 2, 3])
    for model in (plain, ckpt):
        model.criterion(model(images), targets).backward()
    torch.testing.assert_close(ckpt.net.blocks[0].attn.qkv.weight.grad, plain.net.blocks[0].attn.qkv.weight.grad)


def test_compiled_model_keeps_checkpoint_names() -> None:
    """compile=True compiles in place: a checkpoint of a compiled run loads into an eager model and back."""
    compiled = ViTClassifier("test_vit", num_classes=3, img_size=32, patch_size=4, compile=True)
    eager = ViTClassifier("test_vit", num_classes=3, img_size=32, patch_size=4)
    assert list(compiled.state_dict()) == list(eager.state_dict())  # no "_orig_mod." prefix
    eager.load_state_dict(compiled.state_dict())
    assert compiled.net._compiled_call_impl is not None  # forward goes through torch.compile


def test_predict_step_returns_probabilities_and_few_classes_work() -> None:
    model = ViTClassifier("test_vit", num_classes=3, img_size=32, patch_size=4).eval()
    probs = model.predict_step((torch.randn(5, 3, 32, 32), torch.zeros(5)), 0)
    assert probs.shape == (5, 3)
    torch.testing.assert_close(probs.sum(-1), torch.ones(5))
    model.val_metrics.update(torch.randn(5, 3), torch.tensor([0, 1, 2, 0, 1]))  # top-5 caps at 3 classes
    assert model.val_metrics.compute()["val/acc_top5"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_name": "resnet18"}, "does not take img_size/patch_size"),
        ({"model_name": "test_vit", "img_size": 30, "patch_size": 4}, "img_size=30 is not divisible"),
        ({"model_name": "test_vit", "img_size": 40}, "patch size 16"),  # the model's own patch size is checked too
    ],
)
def test_bad_model_options_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ViTClassifier(**kwargs)


def test_the_activation_estimate_is_a_lower_bound_of_what_training_keeps() -> None:
    """Issue 36, class 4: the estimate that refuses img_size 4096 before anything is allocated."""
    from vitlit.checks import activation_bytes

    net = timm.create_model("test_vit", img_size=32, patch_size=4, num_classes=10)
    images = torch.randn(8, 3, 32, 32)
    fit = activation_bytes(net, 8, training=True, precision="32-true", checkpointing=False)
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: kept.append(t.numel() * t.element_size()) or t, lambda t: t
    ):
        net(images).sum()
    assert 0 < fit <= sum(kept)  # a lower bound of what autograd saves
    assert activation_bytes(net, 8, training=False, precision="32-true", checkpointing=False) < fit
    assert activation_bytes(net, 8, training=True, precision="bf16-mixed", checkpointing=False) == fit // 2
    assert activation_bytes(net, 8, training=True, precision="32-true", checkpointing=True) < fit
    assert activation_bytes(torch.nn.Linear(2, 2), 8, True, "32-true", False) is None  # not a ViT: no estimate
    # Issue 46, class 9: unfused attention keeps its heads x tokens x tokens matrix per block; still a lower bound.
    for block in net.blocks:
        block.attn.fused_attn = False
    unfused = activation_bytes(net, 8, training=True, precision="32-true", checkpointing=False)
    assert unfused - fit == 8 * len(net.blocks) * 2 * 65**2 * 4  # batch x blocks x heads x tokens^2 x fp32
    kept.clear()
    with torch.autograd.graph.saved_tensors_hooks(
        lambda t: kept.append(t.numel() * t.element_size()) or t, lambda t: t
    ):
        net(images).sum()
    assert unfused <= sum(kept)


def test_a_weights_file_of_another_shape_names_the_tensor(tmp_path: Path) -> None:
    """Issue 36, stumble 14: the message ended at torch's "Error(s) in loading state_dict for VisionTransformer:"."""
    weights = timm.create_model("test_vit").state_dict()
    weights["blocks.0.attn.qkv.weight"] = torch.zeros(5, 5)
    torch.save(weights, tmp_path / "w.pth")
    with pytest.raises(ConfigError, match=r"\(size mismatch for blocks\.0\.attn\.qkv\.weight: copying a param"):
        ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "w.pth"))


def test_a_pretrained_file_lacking_some_tensors_says_which_were_left_as_initialised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """timm loads a file non-strictly where the head is new, so tensors the file lacks kept their random initial
    values without a word (a variant's ``norm`` for ``fc_norm``, one layer dropped from a file by hand)."""
    source = timm.create_model("test_vit")
    absent = ("blocks.1.mlp.fc1.weight", "norm.weight")
    torch.save({k: v for k, v in source.state_dict().items() if k not in absent}, tmp_path / "partial.pth")
    torch.manual_seed(0)
    with caplog.at_level(logging.INFO):
        model = ViTClassifier(
            "test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "partial.pth")
        )
    after_partial = torch.rand(3)
    said_with(caplog.text, "partial.pth", "not in the file, so left as initialised: 2 tensor(s), "
              "blocks.1.mlp.fc1.weight, norm.weight")  # fmt: skip
    assert not torch.equal(model.net.blocks[1].mlp.fc1.weight, source.blocks[1].mlp.fc1.weight)
    # The check draws the initial values again and puts the generator back: the run's later draws are unchanged.
    torch.save(source.state_dict(), tmp_path / "whole.pth")
    torch.manual_seed(0)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        ViTClassifier("test_vit", num_classes=7, img_size=32, patch_size=4, pretrained_file=str(tmp_path / "whole.pth"))
    assert torch.equal(torch.rand(3), after_partial)
    assert "not in the file" not in caplog.text
    # Names timm converts as it loads (DeiT III's gamma_1 for ls1.gamma) were filled: nothing is said to be left.
    deit3 = {
        k: v * 2 if "ls1.gamma" in k else v
        for k, v in timm.create_model("deit3_small_patch16_224").state_dict().items()
    }
    torch.save({k.replace("ls1.gamma", "gamma_1"): v for k, v in deit3.items()}, tmp_path / "deit3.pth")
    caplog.clear()
    with caplog.at_level(logging.INFO):
        ViTClassifier("deit3_small_patch16_224", num_classes=7, pretrained_file=str(tmp_path / "deit3.pth"))
    said_with(caplog.text, "deit3.pth", "adapted:")
    assert "not in the file" not in caplog.text
