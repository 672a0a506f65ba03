"""``vitlit serve`` under load: a loopback client sends concurrent requests, with dynamic batching on and off.

A checkpoint of the digits recipe (a few steps: the weights do not change the cost) is served twice, with
``--max_batch_size 16`` and ``1``; each time ``--requests`` real digit images are posted as multipart uploads by
``--concurrency`` client threads.

    python benchmarks/serve.py            # last line: serve img_per_s=<x> p50_ms=<y> p99_ms=<z> errors=<n>
    python benchmarks/serve.py --hostile 8  # the same while 8 more clients keep posting a 54 KB 16-bit PNG of
                                            # 5,600 x 5,000 pixels, the costliest one served (issue 46, class 6)
"""

from __future__ import annotations

import argparse
import io
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from helpers.http import free_port, post_file, wait_for

from vitlit.cli import main
from vitlit.data.digits import write_digits_folder
from vitlit.data.images import image_files

CONFIG = Path(__file__).parents[1] / "configs" / "digits.yaml"


def load(url: str, images: list[bytes], requests: int, concurrency: int) -> tuple[float, list[float], int]:
    """Post ``requests`` images with ``concurrency`` threads; return (images/s, latencies in ms, errors)."""

    def one(i: int) -> tuple[float, bool]:
        start = time.perf_counter()
        status, _ = post_file(url, "image", "digit.png", images[i % len(images)])
        return 1000 * (time.perf_counter() - start), status == 200

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    elapsed = time.perf_counter() - start
    return requests / elapsed, [ms for ms, _ in results], sum(not ok for _, ok in results)


def deep_png() -> bytes:
    """A 54 KB 16-bit grey PNG of 5,600 x 5,000 pixels: cheap to send, costly to decode, the most a 16-bit image may
    have (`vitlit.data.images.DECODE_BYTES`)."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((5000, 5600), dtype=np.uint16)).save(buffer, format="PNG")
    return buffer.getvalue()


def flood(url: str, body: bytes, stop: threading.Event) -> int:
    """Post ``body`` again and again until ``stop``; return how many were answered."""
    answered = 0
    while not stop.is_set():
        answered += post_file(url, "image", "deep.png", body)[0] == 200
    return answered


def run(ckpt: Path, images: list[bytes], max_batch_size: int, args: argparse.Namespace) -> str:
    port = free_port()
    command = [sys.executable, "-m", "vitlit", "serve", "--ckpt_path", str(ckpt), "--port", str(port),
               "--max_batch_size", str(max_batch_size), "--accelerator", "cpu"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/health", timeout=180, alive=lambda: server.poll() is None)
        url = f"http://127.0.0.1:{port}/predict"
        load(url, images, 2 * args.concurrency, args.concurrency)  # warm-up
        stop, deep = threading.Event(), deep_png()
        with ThreadPoolExecutor(max(1, args.hostile)) as flooders:
            floods = [flooders.submit(flood, url, deep, stop) for _ in range(args.hostile)]
            rate, latencies, errors = load(url, images, args.requests, args.concurrency)
            stop.set()
        deep_answered = sum(f.result() for f in floods)
    finally:
        server.terminate()  # vitlit serve stops LitServe's workers on SIGTERM
        server.wait(timeout=60)
    p50 = statistics.median(latencies)
    p99 = statistics.quantiles(latencies, n=100)[98]
    line = f"img_per_s={rate:.1f} p50_ms={p50:.1f} p99_ms={p99:.1f} errors={errors}"
    return line + (f" deep_pngs_answered={deep_answered}" if args.hostile else "")


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--hostile", type=int, default=0, help="clients posting a costly 16-bit PNG meanwhile")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vitlit-serve-") as tmp:
        work = Path(tmp)
        data = write_digits_folder(work / "digits")
        quick = ["--trainer.max_steps", "2", "--model.scheduler.init_args.warmup_steps", "0",  # 2 steps: no warmup
                 "--trainer.limit_val_batches", "1", "--trainer.default_root_dir", work]  # fmt: skip
        fit = main([str(a) for a in ["fit", "--config", CONFIG, "--data.root", data, *quick]])
        ckpt = Path(fit.trainer.log_dir) / "checkpoints" / "last.ckpt"
        images = [p.read_bytes() for p in list(image_files(data / "test"))[:64]]
        if not args.hostile:
            unbatched = run(ckpt, images, 1, args)
            print(f"serve max_batch_size=1 ({args.concurrency} concurrent, {args.requests} requests): {unbatched}")
        batched = run(ckpt, images, 16, args)
        print(f"serve max_batch_size=16 ({args.concurrency} concurrent, {args.requests} requests): {batched}")
    print(f"serve {batched}")


if __name__ == "__main__":
    main_()
