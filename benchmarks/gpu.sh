#!/usr/bin/env bash
# Everything a GPU session measures, in under 8 minutes: training images/s, TFLOP/s and MFU of ViT-Ti/4 and ViT-S/4
# at 32 px and ViT-B/16 at 224 px, eager and compiled (benchmarks/gpu.py), then vitlit's per-step overhead against a
# plain PyTorch loop on the GPU (benchmarks/overhead.py). Figures go to ${OUT:-benchmarks/results}/; copy them into
# benchmarks/RESULTS.md with the date and the machine.
#   bash benchmarks/gpu.sh
set -euo pipefail
out="${OUT:-benchmarks/results}"
mkdir -p "$out"
python -c "import vitlit" 2>/dev/null || python -m pip install -q --no-deps -e .
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" || true
# gpu.py starts no new case after --budget seconds; the slowest case (compiled ViT-B) takes about a minute more.
timeout 420 python benchmarks/gpu.py --out "$out/gpu.json" --budget 300 2>&1 | tee "$out/gpu.log" | grep -v -i warn
timeout 90 python benchmarks/overhead.py --device cuda --precision bf16-mixed --model vit_small_patch16_224 \
    --batch-size 512 --batches 30 --epochs 5 2>&1 | tee "$out/overhead_gpu.log" | tail -3
