"""The shape families LayerNorm and RMSNorm share (issue 20): rows x hidden size. Kept apart from
rownorm.py, which imports Triton, so `kernlog list` reads them without it."""
from kernlog.spec import Family

# `check`: small versions the gate checks everywhere (bench gates every member at full size on the GPU).
FAMILIES = (
    Family("hidden", "hidden sizes of real models over 16384 tokens (8 sequences of 2048): GPT-2 small (768), "
           "two odd ones (1000, and 1025, whose rows start off any vector alignment), Llama 2 7B (4096), "
           "13B (5120), 70B (8192), GPT-3 175B (12288)",
           ((16384, 768), (16384, 1000), (16384, 1025), (16384, 4096), (16384, 5120), (16384, 8192),
            (16384, 12288)),
           check=((3, 768), (5, 1000), (3, 1025), (2, 5120), (1, 12288))),
    Family("decode", "a decode step: 1 to 64 tokens cannot fill 132 SMs with a program per row",
           ((1, 4096), (8, 4096), (32, 5120), (64, 8192)),
           check=((1, 4096), (8, 1025))),
)
