"""The CUDA C matmul+ReLU ladder against cuBLAS, side by side in one run (GPU only).

    python3 scripts/matmul_cuda_bench.py [OUT_DIR] [M N K ...]

Each rung is gated first (kernlog's gate, every declared case plus odd shapes); a rung that fails
is reported and not timed. Then every passing rung, torch.mm (cuBLAS bf16) and relu(A@B) are timed
with triton.testing.do_bench, in ROUNDS interleaved rounds, and the medians are written to
OUT_DIR/matmul_cuda_bench.json as they come (a run cut short keeps what it measured). These are
exploration figures; the log's figures come from `kernlog profile matmul_relu`.
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROUNDS = 3
ODD_SHAPES = ((1, 1, 1), (5, 3, 70), (33, 47, 70), (64, 65, 129), (130, 264, 72), (129, 130, 131),
              (1, 264, 136), (16, 16, 2056), (200, 384, 4104))


def main(argv: list[str]) -> int:
    import torch
    import triton.testing

    from kernels.matmul_relu.cuda_ladder import CUDA_REVISIONS
    from kernlog.registry import load_kernel
    from kernlog.run import gate

    out_dir = Path(argv[0]) if argv else Path(".")
    out_dir.mkdir(parents=True, exist_ok=True)
    nums = [int(x) for x in argv[1:]] or [4096, 4096, 4096]
    shapes = [tuple(nums[i:i + 3]) for i in range(0, len(nums), 3)]
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
    result = {"gpu": gpu, "torch": torch.__version__, "rounds": ROUNDS, "gate": {}, "shapes": {}}

    def save():
        (out_dir / "matmul_cuda_bench.json").write_text(json.dumps(result, indent=1))

    kernel = load_kernel(ROOT, "matmul_relu")
    passing = []
    for rev in CUDA_REVISIONS:
        t0 = time.perf_counter()
        res = gate.check_revision(kernel, rev, "cuda", shapes=ODD_SHAPES + kernel.gate_shapes_of(rev))
        failed = [r.line() for r in res if not r.ok]
        result["gate"][rev.name] = {"cases": len(res), "failed": failed[:5], "s": round(time.perf_counter() - t0, 1)}
        print(rev.name, "gate", "ok" if res and not failed else f"FAILED {failed[:2]}", flush=True)
        if res and not failed:
            passing.append(rev)
        save()

    for M, N, K in shapes:
        a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        b = torch.randn(K, N, device="cuda").to(torch.bfloat16)
        out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        fns = {"cublas_mm": lambda: torch.mm(a, b), "relu_mm": lambda: torch.relu(a @ b)}
        for rev in passing:
            launch = rev.load()
            fns[rev.name] = lambda launch=launch: launch((a, b), out)
        times: dict[str, list[float]] = {k: [] for k in fns}
        key = f"{M}x{N}x{K}"
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench(fn, warmup=10, rep=40))
            med = {k: statistics.median(v) for k, v in times.items()}
            flops = 2 * M * N * K
            result["shapes"][key] = {k: {"ms": med[k], "tflops": flops / med[k] / 1e9, "runs_ms": times[k],
                                         "x_cublas": med["cublas_mm"] / med[k]} for k in med}
            save()
        for k, v in result["shapes"][key].items():
            print(f"{key} {k:14s} {v['ms']:.4f} ms {v['tflops']:7.1f} TFLOP/s {v['x_cublas']:.2f}x cuBLAS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
