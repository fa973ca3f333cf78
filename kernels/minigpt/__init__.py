"""MiniGPT's forward pass (models/minigpt) as a multi-kernel target: one launch is
the whole forward, logits for one sequence, and `kernlog profile` records every kernel it
launches (facts.kernels: name and ncu duration) beside the wall time of the whole.

The shape is (layers, width, tokens, vocabulary): a batch of one sequence of `tokens` ids,
heads of 64 (one head below width 64), the MLP 4x wide, no dropout (inference). Inputs are
a model in the dtype with random GPT-2-like weights (N(0, 0.02) matrices, LayerNorm scales
near 1) and random token ids; the reference is the same weights in float64 on the CPU.

Revisions, all on the same weights:
  torch          the model with PyTorch's ops (eager)
  torch_compile  torch.compile of the whole model (Inductor fuses the elementwise work)
  library        softmax, LayerNorm and GeLU through kernlog's library (library_ops: the
                 Triton softmax, LayerNorm v1_looped, GeLU v1_fused), the matmuls PyTorch's
  torch_sdpa     what a fused attention buys: the attention's matmul-mask-softmax-matmul as
                 one F.scaled_dot_product_attention (flash attention), the rest eager
  attention      the same seam filled by kernlog's own fused kernel (attention v1_flash), the
                 rest eager
"""
from __future__ import annotations

import copy
import weakref
from pathlib import Path

from kernels.common import LazyModule, triton_interpreter
from kernlog.frameworks import compiled
from kernlog.spec import DTYPE_BYTES, Kernel, Revision, torch_dtype

torch = LazyModule("torch", globals())
F = LazyModule("torch.nn.functional", globals())
HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
MODEL = ROOT / "models" / "minigpt"
MODEL_FILES = (HERE / "__init__.py", MODEL / "torch_model.py", MODEL / "config.py")
HEAD_DIM = 64


def config(shape):
    from models.minigpt.config import Config

    layers, width, tokens, vocab = shape
    heads = max(1, width // HEAD_DIM) if width % HEAD_DIM == 0 else 1
    return Config(vocab_size=vocab, context=tokens, n_layer=layers, n_head=heads, width=width)


def make_inputs(shape, dtype, gen, device, case="random"):
    from models.minigpt.torch_model import MiniGPT

    cfg = config(shape)
    model = MiniGPT(cfg, dtype=torch_dtype(dtype)).to(device).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            draw = torch.randn(p.shape, generator=gen, device=gen.device)
            # LayerNorm scales near 1; matrices and biases N(0, 0.02)
            draw = 1.0 + 0.1 * draw if name.endswith(".w") and p.ndim == 1 else 0.02 * draw
            p.copy_(draw.to(device=device, dtype=p.dtype))
    idx = torch.randint(0, cfg.vocab_size, (1, cfg.context), generator=gen, device=gen.device).to(device)
    return (model, idx)


def make_output(inputs):
    model, idx = inputs
    return torch.empty((idx.shape[1], model.cfg.vocab_size), dtype=model.wte.dtype, device=idx.device)


def reference(inputs, out=None):
    from models.minigpt.torch_model import MiniGPT

    model, idx = inputs
    ref = MiniGPT(model.cfg, dtype=torch.float64)
    ref.load_state_dict({k: v.detach().to("cpu", torch.float64) for k, v in model.state_dict().items()})
    with torch.no_grad():
        return ref.eval()(idx.cpu())[0]


def n_params(shape) -> int:
    layers, C, T, V = shape
    return V * C + T * C + layers * (12 * C * C + 13 * C) + 2 * C


def bytes_moved(shape, dtype):
    """The fewest DRAM bytes: every weight read once, the ids read and the logits written."""
    layers, C, T, V = shape
    return n_params(shape) * DTYPE_BYTES[dtype] + T * 8 + T * V * DTYPE_BYTES[dtype]


def flops(shape):
    """The matmuls: 2 per weight per token (QKV, projection, MLP, head) and the attention's
    two T x T x C products per layer, computed whole (the mask is applied after)."""
    layers, C, T, V = shape
    return 2 * T * (layers * 12 * C * C + V * C) + layers * 4 * T * T * C


def _variant(model, key, make):
    """The model's variant for one revision, made once per model: a shallow copy that shares
    its weights (modules and parameters) and differs in `ops` or is compiled."""
    cache = _VARIANTS.setdefault(key, weakref.WeakKeyDictionary())
    if model not in cache:
        cache[model] = make(model)
    return cache[model]


_VARIANTS: dict = {}


def _with_ops(ops):
    def make(model):
        m = copy.copy(model)
        m.ops = ops
        return m
    return make


def _launcher(key, make):
    def launch(inputs, out):
        model, idx = inputs
        with torch.no_grad():
            return out.copy_(_variant(model, key, make)(idx)[0])
    return launch


def _load_torch():
    return _launcher("torch", lambda m: m)


def _load_compile():
    return _launcher("torch_compile", compiled)


def _load_library():
    from models.minigpt.library_ops import library_ops

    ops = library_ops(ROOT)
    return _launcher("library", _with_ops(ops))


def _sdpa(q, k, v, scale):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def _load_sdpa():
    from dataclasses import replace

    from models.minigpt.torch_model import TORCH_OPS

    return _launcher("torch_sdpa", _with_ops(replace(TORCH_OPS, attention=_sdpa)))


ATTENTION_REV = "v1_flash"  # the attention ladder's rung the `attention` revision runs
ATTENTION = (ROOT / "kernels" / "attention" / "v1_flash.py", Path(triton_interpreter.__file__).resolve())


def _load_attention():
    from dataclasses import replace

    from kernlog.registry import load_kernel
    from models.minigpt.torch_model import TORCH_OPS

    launch = load_kernel(ROOT, "attention").revision(ATTENTION_REV).load()

    def attention(q, k, v, scale):
        # q, k, v are (B, T, H, D) slices of the qkv product seen as (B, H, T, D): the kernel
        # reads them through their strides, no copy. It writes o through a (B, T, H, D) buffer
        # seen the same way, so the model's transpose(1, 2).reshape(B, T, C) after it is a view.
        B, H, T, D = q.shape
        out = torch.empty((B, T, H, D), dtype=q.dtype, device=q.device).transpose(1, 2)
        return launch((q, k, v, scale), out)

    return _launcher("attention", _with_ops(replace(TORCH_OPS, attention=attention)))


def _attention_refuses(shape) -> str:
    from kernels.attention import refuses_head_dim

    return refuses_head_dim((config(shape).head_dim,))


LIBRARY = (MODEL / "library_ops.py", ROOT / "kernels" / "softmax" / "softmax_triton.py",
           ROOT / "kernels" / "layernorm" / "v1_looped.py", ROOT / "kernels" / "common" / "rownorm.py",
           ROOT / "kernels" / "gelu" / "v1_fused.py", ROOT / "kernels" / "dropout" / "v1_rand4x.py")

REVISIONS = (
    Revision("torch", "torch", MODEL_FILES, _load_torch, "the model with PyTorch's ops, eager",
             role="reference"),
    Revision("torch_compile", "torch", MODEL_FILES, _load_compile,
             "torch.compile of the whole model (Inductor), static shapes", role="reference"),
    Revision("library", "triton", (*MODEL_FILES, *LIBRARY), _load_library,
             "softmax, LayerNorm, GeLU through kernlog's library (Triton softmax, LayerNorm v1_looped, "
             "GeLU v1_fused); matmuls and the rest PyTorch's",
             "a few % faster than eager where softmax and LayerNorm take a visible share; "
             "the matmuls dominate at GPT-2 size"),
    Revision("torch_sdpa", "torch", MODEL_FILES, _load_sdpa,
             "attention as one F.scaled_dot_product_attention (fused: no T x T scores in DRAM), the rest eager",
             "what a fused attention kernel would buy the library: the softmax's and the score matmuls' "
             "share at 1024 tokens, minus the fused kernel's own time", role="reference"),
    Revision("attention", "triton", (*MODEL_FILES, *ATTENTION), _load_attention,
             "attention as kernlog's fused Triton kernel (attention v1_flash), the rest eager",
             "most of torch_sdpa's gain over eager: the T x T scores stay on chip", refuses=_attention_refuses),
)

KERNEL = Kernel(
    name="minigpt",
    revisions=REVISIONS,
    make_inputs=make_inputs,
    make_output=make_output,
    reference=reference,
    bytes_moved=bytes_moved,
    flops=flops,
    ceiling="matmul",
    # Small odd models for the gate (tokens and vocabulary not powers of two, one and two heads);
    # the sizes timed: a tiny model, where launches dominate, and GPT-2 small (124M parameters).
    check_shapes=((1, 64, 17, 97), (2, 128, 33, 257)),
    bench_shapes=((2, 128, 128, 512), (12, 768, 1024, 50257)),
    profile_shape=(12, 768, 1024, 50257),
    sweep_axis=0,
    # ~230 kernels per GPT-2-small forward: the full set (34 replay passes each) took minutes per
    # revision; these give each kernel's duration, throughputs and launch shape.
    sections=("SpeedOfLight", "LaunchStats"),
    trace_kernels=True,
    # ncu replays each kernel it profiles (~0.6 s each with these sections on the H100: the
    # tiny model's 4 x ~40 kernels ran past 96 s); it profiles the ops the library replaces --
    # softmax, LayerNorm and GeLU in any implementation (PyTorch's, Inductor's fused ones, the
    # library's Triton kernels) -- and the CUPTI trace times all of them, matmuls included.
    ncu_kernels="(?i).*(softmax|layer_?norm|gelu|_rows_kernel|_split_kernel|_pipe_kernel|_online_kernel|loop_kernel).*",
    # bf16: each logit is a sum over the width of products rounded at 2^-8, after blocks of the
    # same, so its error is absolute, about a fixed share of the row's typical logit, and a logit
    # near zero carries it whole (torch's own bf16 model: 4e-3 relative L2, single logits off by
    # a third of the row's mean |logit|). fp32 keeps the default (4e-7 measured on the CPU).
    tolerance={"bf16": {"l2": 3e-2, "row": 5e-2, "rtol": 2**-4, "atol": 0.5}},
    doc=__doc__,
)
