"""A Llama-3-8B-shaped decoder layer's GEMMs (hidden 4096, 32 query heads and 8 key/value heads of
128, MLP 14336), for `gemmtune shapes from-torch`. Attention's own score and value products are
left out (they are batched GEMMs of the sequence length, not weights); the projections and the MLP
are what a model spends its GEMM time on.

    gemmtune shapes from-torch examples/llama_layer.py:make_model --input 2048x4096:bf16 --device meta --out llama.json

On the meta device nothing is computed: the shapes are recorded without memory or time.
"""
import torch
from torch import nn

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, MLP = 4096, 32, 8, 128, 14336


class LlamaLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.gate = nn.Linear(HIDDEN, MLP, bias=False)
        self.up = nn.Linear(HIDDEN, MLP, bias=False)
        self.down = nn.Linear(MLP, HIDDEN, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        # Stand-in for attention (shape-preserving): the projections around it are the layer's GEMMs.
        attended = q + torch.repeat_interleave(k + v, HEADS // KV_HEADS, dim=-1)
        x = x + self.o(attended)
        return x + self.down(nn.functional.silu(self.gate(x)) * self.up(x))


def make_model() -> nn.Module:
    return LlamaLayer().to(torch.bfloat16)
