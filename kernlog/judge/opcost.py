"""The fewest bytes and FLOPs one aten op call needs, from the input shapes torch.profiler
recorded (record_shapes): what a perfect kernel for that call would move and compute.

- matmuls (mm, addmm, bmm, baddbmm, matmul, linear) and convolutions: 2*M*N*K FLOPs (a
  convolution's M*N*K from its output and filter), bytes of the inputs and the output;
- elementwise ops and row-wise ones (softmax, the norms): bytes of the inputs and the output
  (the output shaped as the inputs broadcast, or as the first input), no FLOPs counted: they
  sit on the bandwidth roof;
- reductions to a smaller tensor (sum, mean, amax, ...): the inputs' bytes (the output's,
  at most one row's worth, left out: a lower bound still);
- anything else: None, and the caller falls back on ncu's measured DRAM bytes.

The output's dtype is taken to be the first tensor input's (a cast, `_to_copy`, may differ).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass

# torch.profiler's "Input type" names of tensor element types, and their bytes
TYPE_BYTES = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "long int": 8, "int": 4,
              "short int": 2, "bool": 1, "unsigned char": 1, "signed char": 1, "c10::Float8_e4m3fn": 1,
              "c10::Float8_e5m2": 1, "c10::complex<float>": 8}
HALF_TYPES = ("c10::BFloat16", "c10::Half", "c10::Float8_e4m3fn", "c10::Float8_e5m2")

MATMULS = {"aten::mm", "aten::addmm", "aten::_addmm_activation", "aten::bmm", "aten::baddbmm", "aten::matmul",
           "aten::linear"}
# op -> (index of stride, padding, dilation, groups) among its arguments
CONVS = {"aten::conv2d": (3, 4, 5, 6), "aten::convolution": (3, 4, 5, 8), "aten::_convolution": (3, 4, 5, 8),
         "aten::cudnn_convolution": (3, 2, 4, 5), "aten::mkldnn_convolution": (4, 3, 5, 6)}
ELEMENTWISE = {"add", "sub", "mul", "div", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "neg", "pow",
               "sqrt", "rsqrt", "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "threshold", "hardtanh",
               "clone", "contiguous", "_to_copy", "to", "abs", "native_dropout", "dropout", "erf", "reciprocal",
               "maximum", "minimum", "addcmul", "addcdiv", "lerp", "square", "sin", "cos", "tril", "triu"}
ROWWISE = {"softmax", "_softmax", "log_softmax", "_log_softmax", "layer_norm", "native_layer_norm", "rms_norm",
           "_fused_rms_norm", "group_norm", "native_group_norm", "batch_norm", "native_batch_norm",
           "cudnn_batch_norm", "_batch_norm_impl_index", "_native_batch_norm_legit_no_training", "instance_norm"}
REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "norm",
              "linalg_vector_norm", "argmax", "argmin", "logsumexp", "prod", "all", "any"}
WRITE_ONLY = {"fill", "zero", "normal", "uniform", "bernoulli"}


@dataclass(frozen=True)
class Cost:
    """One call's minimum: DRAM bytes, FLOPs (None where not counted), its output."""
    bytes: float
    flops: float | None
    out_dims: tuple[int, ...] | None
    out_type: str | None
    model: str  # which rule counted it


def tensors(inputs) -> list[tuple[tuple[int, ...], str]]:
    return [(tuple(d), t) for d, t in inputs if t in TYPE_BYTES]


def nbytes(dims, type_name: str) -> int:
    return math.prod(dims) * TYPE_BYTES[type_name]


def broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return tuple(max(col) for col in zip(*padded, strict=True))


def _matmul(op: str, ts: list) -> tuple[float, tuple[int, ...]] | None:
    if op in ("aten::addmm", "aten::_addmm_activation", "aten::baddbmm"):
        ts = ts[1:]  # the bias first
    if len(ts) < 2:
        return None
    a, b = ts[0][0], ts[1][0]
    if op == "aten::linear":
        if len(b) != 2 or not a or a[-1] != b[1]:
            return None
        return 2 * math.prod(a[:-1]) * b[0] * b[1], (*a[:-1], b[0])
    if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
        return None
    batch = broadcast([a[:-2], b[:-2]])
    m, k, n = a[-2], a[-1], b[-1]
    return 2 * math.prod(batch) * m * n * k, (*batch, m, n)


def _listed(text: str, rank: int) -> list[int] | None:
    try:
        v = json.loads(text)
    except (ValueError, TypeError):
        return None
    v = [v] * rank if isinstance(v, int) else v
    return v if isinstance(v, list) and len(v) == rank and all(isinstance(x, int) for x in v) else None


def _conv(op: str, ts: list, concrete: tuple[str, ...]) -> tuple[float, tuple[int, ...]] | None:
    at = CONVS[op]
    if len(ts) < 2 or len(concrete) <= max(at):
        return None
    x, w = ts[0][0], ts[1][0]
    rank = len(x) - 2
    if rank < 1 or len(w) != len(x):
        return None
    stride, pad, dil = (_listed(concrete[i], rank) for i in at[:3])
    try:
        groups = int(concrete[at[3]])
    except ValueError:
        return None
    if stride is None or pad is None or dil is None:
        return None
    spatial = tuple((x[2 + i] + 2 * pad[i] - dil[i] * (w[2 + i] - 1) - 1) // stride[i] + 1 for i in range(rank))
    if min(spatial) < 1 or groups < 1:
        return None
    out = (x[0], w[0], *spatial)
    return 2 * math.prod(out) * math.prod(w[1:]), out


def minimum_cost(op: str, inputs, concrete: tuple[str, ...] = ()) -> Cost | None:
    """The call's minimum bytes and FLOPs, or None where no rule knows the op or its shapes."""
    ts = tensors(inputs)
    if not ts:
        return None
    in_bytes = sum(nbytes(d, t) for d, t in ts)
    first_type = ts[0][1]
    if op in MATMULS or op in CONVS:
        got = _matmul(op, ts) if op in MATMULS else _conv(op, ts, concrete)
        if got is None:
            return None
        flops, out = got
        return Cost(in_bytes + nbytes(out, first_type), flops, out, first_type,
                    "2*M*N*K FLOPs; inputs + output bytes")
    name = op.split("::", 1)[-1]
    inplace = name.endswith("_") and not name.endswith("__")
    base = name[:-1] if inplace else name
    if base == "copy":  # self is written, src read
        out = ts[0][0]
        return Cost(sum(nbytes(d, t) for d, t in ts[1:]) + nbytes(out, first_type), None, out, first_type,
                    "copy: source + destination bytes")
    if base in WRITE_ONLY:
        return Cost(nbytes(ts[0][0], first_type), None, ts[0][0], first_type, "write only: output bytes")
    if base in ELEMENTWISE:
        out = ts[0][0] if inplace else broadcast([d for d, _ in ts])
        return Cost(in_bytes + nbytes(out, first_type), None, out, first_type, "elementwise: inputs + output bytes")
    if base in ROWWISE:
        out = ts[0][0]
        return Cost(in_bytes + nbytes(out, first_type), None, out, first_type, "row-wise: inputs + output bytes")
    if base in REDUCTIONS:
        return Cost(in_bytes, None, None, None, "reduction: input bytes (the small output left out)")
    return None


def flops_peak_tflops(type_name: str | None, tensor_tflops: float | None, fp32_tflops: float | None) -> float | None:
    """The compute roof a call of this element type sits under: tensor cores for 16-bit and
    smaller types, the CUDA cores' fp32 peak otherwise (TF32 left out: torch's matmul default)."""
    return tensor_tflops if type_name in HALF_TYPES else fp32_tflops
