"""What torch.compile does with relu(A @ B) at a language model's head (GPU): Inductor's padding
settings, the code it generates, and the kernels the compiled and the eager call launch, each
with its GPU time (torch.profiler), bf16 as kernels/matmul_relu times it.

    python3 scripts/inductor_lm_head.py --shape 4096x50257x768 [--code]
"""
from __future__ import annotations

import argparse


def kernel_table(fn, a, b, calls: int = 10) -> str:
    import torch

    for _ in range(3):
        fn(a, b)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn(a, b)
        torch.cuda.synchronize()
    rows = [(e.key, e.device_time_total / calls, e.count // calls) for e in prof.key_averages() if e.device_time_total]
    rows.sort(key=lambda r: -r[1])
    total = sum(r[1] for r in rows)
    lines = [f"{'us/call':>9} {'launches':>8}  kernel"]
    lines += [f"{us:9.1f} {n:8d}  {name[:110]}" for name, us, n in rows]
    return "\n".join(lines + [f"{total:9.1f}           total"])


def main() -> None:
    import torch
    import torch._inductor.config as inductor
    from torch._inductor.utils import run_and_get_code

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="4096x50257x768", help="MxNxK")
    p.add_argument("--code", action="store_true", help="print Inductor's generated code")
    args = p.parse_args()
    M, N, K = (int(x) for x in args.shape.split("x"))
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    print(f"== {M}x{N}x{K} bf16 on {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"inductor: shape_padding={inductor.shape_padding} comprehensive_padding={inductor.comprehensive_padding} "
          f"max_autotune={inductor.max_autotune}")

    def eager(a, b):
        return torch.relu(a @ b)

    compiled = torch.compile(eager)
    _, code = run_and_get_code(compiled, a, b)
    if args.code:
        print("-- Inductor's code\n" + "\n\n".join(code))
    for name, fn in (("eager", eager), ("torch.compile", compiled)):
        print(f"-- {name}: kernels per call\n{kernel_table(fn, a, b)}")


if __name__ == "__main__":
    main()
