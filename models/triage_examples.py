"""Programs for `kernlog triage module:function`: each function builds a model and its inputs
(on the GPU in bf16 where there is one, else on the CPU in fp32) and returns the
zero-argument callable that runs one forward pass."""
from __future__ import annotations

from kernlog.errors import KernlogError


def _device():
    import torch

    return ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)


def resnet50(batch: int = 32):
    """torchvision's ResNet-50 (random weights), a batch of 224 x 224 images."""
    try:
        import torchvision
    except ImportError:
        raise KernlogError("torchvision is missing: `pip install torchvision` for the resnet50 example") from None
    import torch

    device, dtype = _device()
    model = torchvision.models.resnet50().to(device=device, dtype=dtype).eval()
    x = torch.randn(batch, 3, 224, 224, device=device, dtype=dtype)

    def run():
        with torch.no_grad():
            return model(x)
    return run


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
