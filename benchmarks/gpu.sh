#!/usr/bin/env bash
# Everything a GPU session checks and measures, in under 8 minutes, in this order:
#   1. smoke: every shipped config trains a few steps in its exact precision (16-mixed with the GradScaler, or
#      bf16-mixed), clipping, fused AdamW and compile as shipped, real architectures, on the small test CIFAR files
#      (the tests marked `cuda` in tests/test_precision.py), so a gap between CPU tests and GPU runs shows at once;
#   2. training images/s, TFLOP/s and MFU of ViT-Ti/4 and ViT-S/4 at 32 px and ViT-B/16 at 224 px, eager and compiled
#      (benchmarks/gpu.py);
#   3. vitlit's per-step overhead against a plain PyTorch loop on the GPU (benchmarks/overhead.py), with and without
#      the configs' callbacks, and a count of host syncs per step with their source;
#   4. the batched AutoAugment's own images/s at 32 and 224 px (benchmarks/data_pipeline.py --policy-device cuda), and
#      the whole device half at 224 px from CIFAR's 32 px (resized crop, flip, TrivialAugmentWide; --pipeline-device),
#      to read beside step 2's ViT-B/16 images/s at 224 px.
# A failing step does not stop the later ones (one GPU session should bring back every figure it can); the exit
# status is that of the first failure. Logs and JSON go to ${OUT:-benchmarks/results}/; copy the figures into
# benchmarks/RESULTS.md with the date and the machine.
#   bash benchmarks/gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-benchmarks/results}"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
mkdir -p "$out"
# Run from the checkout without installing it (a GPU machine may have no package index to build from).
"$py" -c "import vitlit" 2>/dev/null || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
"$py" -c "import torch, lightning, timm; print('torch', torch.__version__, 'lightning', lightning.__version__, 'timm', \
timm.__version__)" | tee -a "$out/gpu.csv"

status=0
step() {  # step <name> <seconds> <command...>: run with a time limit, log to $out/<name>.log, remember a failure
    local name=$1 limit=$2
    shift 2
    local started=$SECONDS
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    grep -v -i -E "warn|^\s*$" "$out/$name.log" | tail -12
    echo "== $name: exit $rc after $((SECONDS - started)) s"
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
}

# -o addopts: one process (the GPU machine need not have pytest-xdist, which pyproject's addopts asks for).
step smoke 150 "$py" -m pytest -o addopts="-ra --strict-markers" -m cuda tests/test_precision.py -q \
    -p no:cacheprovider --durations=5
# gpu.py starts no new case after --budget seconds; the slowest case (compiled ViT-B) takes about a minute more.
step gpu 240 "$py" benchmarks/gpu.py --out "$out/gpu.json" --budget 130
vit_s=(--device cuda --precision bf16-mixed --model vit_small_patch16_224 --batch-size 512)
step overhead_gpu 60 "$py" benchmarks/overhead.py "${vit_s[@]}" --batches 90 --epochs 4
# The same without the configs' NonFiniteGuard and SpeedMonitor (then named Throughput; 2026-11-30: 1.019 vs 1.204 with them), and where
# vitlit's remaining host syncs come from.
step overhead_gpu_bare 60 "$py" benchmarks/overhead.py "${vit_s[@]}" --batches 90 --epochs 4 --no-callbacks
step sync_debug 40 "$py" benchmarks/overhead.py "${vit_s[@]}" --batches 20 --epochs 2 --sync-debug
# The batched AutoAugment alone, batch 512, at 32 and 224 px (issue 16: at least 5x the model's training images/s).
step policy_gpu 40 "$py" benchmarks/data_pipeline.py --policy-device cuda --batch-size 512
# The one pipeline at 224 px as the CIFAR-100 ViT-B/16 recipes run it (issue 53: its img/s beside the model's).
step pipeline_gpu 30 "$py" benchmarks/data_pipeline.py --pipeline-device cuda --batch-size 256
exit "$status"
