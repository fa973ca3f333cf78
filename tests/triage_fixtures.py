"""Synthetic torch.profiler Chrome traces and kernel rows for the triage tests, built in Python.
Event fields as torch 2.13 exports them (checked against a CPU trace of nn.Sequential)."""
from __future__ import annotations

from kernlog.capture.trace import KernelRow

T0 = 4880213522547.0  # traces' timestamps are large floats (us)
PID, TID, OTHER_TID = 985, 985, 990


def cpu_op(name, ts, dur, dims=(), types=(), tid=TID, concrete=None):
    args = {"External id": int(ts), "Input Dims": [list(d) for d in dims], "Input type": list(types)}
    if concrete is not None:
        args["Concrete Inputs"] = list(concrete)
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": tid, "ts": T0 + ts, "dur": dur, "args": args}


def module(name, ts, dur, tid=TID):
    return {"ph": "X", "cat": "python_function", "name": f"nn.Module: {name}", "pid": PID, "tid": tid,
            "ts": T0 + ts, "dur": dur, "args": {}}


def launch(corr, ts, tid=TID, cat="cuda_runtime", name="cudaLaunchKernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": T0 + ts, "dur": 3.0,
            "args": {"correlation": corr, "cbid": 211}}


def kernel(name, corr, ts, dur):
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": T0 + ts, "dur": dur,
            "args": {"correlation": corr, "device": 0, "stream": 7}}


GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
REDUCE = "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>(cublasSplitKParams<float>)"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int, ...)"


def two_op_trace() -> dict:
    """Sequential(Linear, GELU): aten::linear -> aten::addmm launches a GEMM and a split-K reduce,
    aten::gelu one elementwise kernel. Another thread runs aten::mul over the GEMM's launch time:
    it must not claim it. Events are out of order, as exporters may write them."""
    bf = "c10::BFloat16"
    return {"traceEvents": [
        kernel(GELU, 3, 400.0, 40.0),
        module("Sequential_0", 0, 300),
        module("Linear_0", 2, 150),
        cpu_op("aten::linear", 5, 140, [(64, 256), (512, 256), (512,)], [bf, bf, bf]),
        cpu_op("aten::addmm", 20, 100, [(512,), (64, 256), (256, 512), (), ()], [bf, bf, bf, "Scalar", "Scalar"]),
        launch(1, 40), launch(2, 80),
        cpu_op("aten::mul", 30, 60, [(64, 512), (64, 512)], ["float", "float"], tid=OTHER_TID),
        module("GELU_0", 160, 100),
        cpu_op("aten::gelu", 170, 80, [(64, 512), ()], [bf, ""]),
        launch(3, 200),
        kernel(GEMM, 1, 300.0, 70.0),
        kernel(REDUCE, 2, 371.0, 10.0),
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep", "pid": PID, "tid": TID, "ts": T0, "dur": 500},
        {"ph": "f", "cat": "ac2g", "id": 1, "pid": 0, "tid": 7, "ts": T0 + 300.0},
    ]}


def row(name, us, start, op="", inputs=(), call=-1, module_="", concrete=()):
    return KernelRow(name=name, us=us, start_us=start, op=op, top_op=op, call=call, inputs=tuple(inputs),
                     module=module_, modules=(module_,) if module_ else (), concrete=tuple(concrete))


def f32(*dims):
    return (tuple(dims), "float")


def bf16(*dims):
    return (tuple(dims), "c10::BFloat16")
