"""``vitlit models``: timm's Vision Transformers with their size and cost at a given image and patch size."""

from __future__ import annotations

import pytest
from helpers.cli import run_cli

from vitlit import ViTClassifier


def test_models_lists_sizes_as_vitlit_builds_them(capsys: pytest.CaptureFixture[str]) -> None:
    listed = run_cli("models", "vit_tiny_patch16_2*", "--img_size", "32", "--patch_size", "4", "--num_classes", "10")
    out = capsys.readouterr().out
    (tiny,) = listed
    built = ViTClassifier(model_name="vit_tiny_patch16_224", patch_size=4, img_size=32, num_classes=10).net
    assert (
        tiny["params"] == sum(p.numel() for p in built.parameters()) and tiny["tokens"] == 65
    )  # 64 patches and the class token
    # Forward FLOPs of one 32 px image: 12 blocks of 65 tokens at width 192 are about 0.7 GFLOPs (2 per MAC).
    assert 0.6 < tiny["gflops"] < 0.8 and tiny["weights"] >= 1  # augreg weight sets, counted without a download
    assert "vit_tiny_patch16_224" in out and "5.4M" in out


def test_models_names_a_size_a_model_cannot_take_and_refuses_an_empty_pattern(
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tiny,) = run_cli("models", "vit_tiny_patch16_224", "--img_size", "8", "--patch_size", "16")
    assert "error" in tiny and f"({tiny['error']})" in capsys.readouterr().out  # a patch larger than the image
    with pytest.raises(SystemExit) as exit_info:
        run_cli("models", "no_such_model*")
    assert exit_info.value.code == 2 and "no timm Vision Transformer matches" in capsys.readouterr().err
