"""Programs for `kernlog triage module:function`: each function builds a model and its inputs
(on the GPU in bf16 where there is one, else on the CPU in fp32) and returns the
zero-argument callable that runs one forward pass."""
from __future__ import annotations

from kernlog.errors import KernlogError


def _device():
    import torch

    return ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)


def _vision(name: str, batch: int, compiled: bool = False):
    """torchvision's model `name` (random weights), its forward on a batch of 224 x 224 images;
    `compiled`: the model through torch.compile (Inductor, default mode), compiled on first call."""
    try:
        import torchvision
    except ImportError:
        raise KernlogError(f"torchvision is missing: `pip install torchvision` for the {name} example") from None
    import torch

    device, dtype = _device()
    model = getattr(torchvision.models, name)().to(device=device, dtype=dtype).eval()
    if compiled:
        model = torch.compile(model)
    x = torch.randn(batch, 3, 224, 224, device=device, dtype=dtype)

    def run():
        with torch.no_grad():
            return model(x)
    return run


def resnet50(batch: int = 32):
    """torchvision's ResNet-50 (random weights), a batch of 224 x 224 images."""
    return _vision("resnet50", batch)


def swin_t(batch: int = 32):
    """torchvision's Swin-T (random weights), batch 32: many small kernels (window attention,
    LayerNorms over 96 to 768 channels), so the host's launches can set its pace."""
    return _vision("swin_t", batch)


def resnet50_compiled(batch: int = 32):
    """resnet50 through torch.compile: the triage's compile candidate, built (--verify --baseline)."""
    return _vision("resnet50", batch, compiled=True)


def swin_t_compiled(batch: int = 32):
    """swin_t through torch.compile: the triage's compile candidate, built (--verify --baseline)."""
    return _vision("swin_t", batch, compiled=True)


def vit_b_16(batch: int = 64):
    """torchvision's ViT-B/16 (random weights), batch 64: few, large kernels; GPU-bound."""
    return _vision("vit_b_16", batch)


def _block(width: int, heads: int):
    from torch import nn

    class Block(nn.Module):
        """Pre-norm transformer block: attention (nn.MultiheadAttention), then a 4x GELU MLP."""

        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

        def forward(self, x):
            h = self.ln1(x)
            x = x + self.attn(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    return Block()


def transformer_block(batch: int = 8, seq: int = 1024, width: int = 768, heads: int = 12):
    """One transformer block built from torch.nn modules, batch 8 x sequence 1024 x width 768."""
    import torch

    device, dtype = _device()
    model = _block(width, heads).to(device=device, dtype=dtype).eval()
    x = torch.randn(batch, seq, width, device=device, dtype=dtype)

    def run():
        with torch.no_grad():
            return model(x)
    return run


ATTENTIONS = ("eager", "sdpa", "kernlog", "kernlog_fused")


def minigpt_train(attention: str = "eager", batch: int = 8, layers: int = 12, width: int = 768, tokens: int = 1024,
                  vocab: int = 50257):
    """One training step of GPT-2 small (models.minigpt: 12 layers, width 768, 12 heads of 64,
    1024 tokens, vocabulary 50257; 124M parameters), batch 8: forward, cross-entropy on random
    targets, backward, AdamW (fused on the GPU), gradients cleared. Weights in fp32 under
    torch.autocast to bf16 on the GPU (about 30 GB at batch 8 with eager attention, most of it
    the saved T x T scores); fp32 on the CPU. `attention`: "eager" (scores, mask, softmax, @ v),
    "sdpa" (F.scaled_dot_product_attention), "kernlog" (kernlog's attention v1_flash, see
    minigpt_train_attention) or "kernlog_fused" (its forward and its fused backward, see
    minigpt_train_fused_attention)."""
    import torch
    import torch.nn.functional as F

    from models.minigpt.config import Config
    from models.minigpt.torch_model import MiniGPT

    if attention not in ATTENTIONS:
        raise KernlogError(f"attention {attention!r} is not one of {', '.join(ATTENTIONS)}")
    device, _ = _device()
    cfg = Config(vocab_size=vocab, context=tokens, n_layer=layers, n_head=max(1, width // 64), width=width)
    model = MiniGPT(cfg, dtype=torch.float32).to(device).train()
    model.ops = _train_ops(attention)
    with torch.no_grad():  # GPT-2's initialisation: matrices N(0, 0.02), biases 0, LayerNorm scales 1
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0 if name.endswith(".w") else 0.0)
            else:
                p.normal_(0.0, 0.02)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=device == "cuda")
    idx = torch.randint(0, vocab, (batch, tokens), device=device)
    targets = torch.randint(0, vocab, (batch, tokens), device=device)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            logits = model(idx)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def minigpt_train_attention(batch: int = 8):
    """minigpt_train with attention as kernlog's fused Triton kernel (attention v1_flash). The
    kernel is forward only: the backward here is the eager math's, from q, k, v, the output and
    the rows' log-sum-exp the kernel saves (the scores recomputed, softmax's max and sum not),
    as FlashAttention's backward does blockwise. Against minigpt_train("eager") the step saves
    the forward's score traffic (mask, softmax, the T x T probabilities kept for the backward)
    and pays one recomputed q k^T and exp in the backward: a training step's verification
    measures the forward's savings less that, not a fused backward's."""
    return minigpt_train("kernlog", batch=batch)


def minigpt_train_fused_attention(batch: int = 8):
    """minigpt_train with attention forward and backward through kernlog's kernels
    (kernels/attention_backward/trainable.py: attention_backward v2_split's forward, which keeps
    each row's log-sum-exp, and its backward from it). Against
    minigpt_train_attention, the backward's T x T recomputed scores and probabilities never
    reach DRAM either."""
    return minigpt_train("kernlog_fused", batch=batch)


def _train_ops(attention: str):
    from dataclasses import replace

    from models.minigpt.torch_model import TORCH_OPS

    if attention == "eager":
        return TORCH_OPS
    if attention == "sdpa":
        import torch.nn.functional as F

        return replace(TORCH_OPS, attention=lambda q, k, v, scale: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale))
    if attention == "kernlog_fused":
        fused = _kernel_module("attention_backward", "trainable").attention
        return replace(TORCH_OPS, attention=lambda q, k, v, scale: fused(q, k, v, scale))
    return replace(TORCH_OPS, attention=kernlog_attention())


def _kernel_module(kernel: str, module: str, revision: str | None = None):
    """kernels/<kernel>/<module>.py, once the registry has loaded `kernel` (the kernels package
    on the path) and found its `revision`, where one is named."""
    import importlib
    from pathlib import Path

    from kernlog.registry import find_root, load_kernel

    spec = load_kernel(find_root(Path(__file__).resolve().parent), kernel)
    if revision is not None:
        spec.revision(revision)  # a revision of the ladder, or KeyError naming it
    return importlib.import_module(f"kernels.{kernel}.{module}")


def kernlog_attention(revision: str = "v1_flash"):
    """attention(q, k, v, scale) through kernlog's attention kernel, differentiable: the forward
    is the kernel's (which also writes each row's log-sum-exp), the backward the eager math's
    from it. Under autocast the inputs are cast to its dtype, as F.scaled_dot_product_attention's
    are."""
    import torch

    run = _kernel_module("attention", revision, revision).attention

    class Attention(torch.autograd.Function):
        @staticmethod
        @torch.amp.custom_fwd(device_type="cuda", cast_inputs=torch.bfloat16)
        def forward(ctx, q, k, v, scale):
            B, H, T, D = q.shape
            out = torch.empty((B, T, H, D), dtype=q.dtype, device=q.device).transpose(1, 2)
            lse = torch.empty((B, H, T), dtype=torch.float32, device=q.device)
            run(q, k, v, scale, out, lse=lse)
            ctx.save_for_backward(q, k, v, out, lse)
            ctx.scale = scale
            return out

        @staticmethod
        @torch.amp.custom_bwd(device_type="cuda")
        def backward(ctx, grad):
            q, k, v, out, lse = ctx.saved_tensors
            return (*_attention_backward(q, k, v, out, lse, grad, ctx.scale), None)

    return Attention.apply


def _attention_backward(q, k, v, out, lse, grad, scale):
    """dq, dk, dv of causal attention from its output and the rows' log-sum-exp: the
    probabilities are exp(s - lse), with no max or sum to take again."""
    import torch

    T = q.shape[-2]
    above = torch.ones((T, T), dtype=torch.bool, device=q.device).triu(1)
    # the scores again in fp32, as the kernel took them: bf16 scores (autocast is back on in a
    # custom backward) put exp(s - lse) rows off 1 by up to ~13% at large logits
    with torch.autocast(q.device.type, enabled=False):
        s = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    p = torch.exp(s.masked_fill_(above, float("-inf")) - lse[..., None])
    grad = grad.to(q.dtype)
    dv = torch.matmul(p.to(q.dtype).transpose(-2, -1), grad)
    dp = torch.matmul(grad, v.transpose(-2, -1)).float()
    ds = (p * (dp - (grad.float() * out.float()).sum(-1, keepdim=True))).to(q.dtype)
    return torch.matmul(ds, k) * scale, torch.matmul(ds.transpose(-2, -1), q) * scale, dv
