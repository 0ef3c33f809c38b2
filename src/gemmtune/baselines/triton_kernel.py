"""The Triton matmul (after Triton's matmul tutorial: grouped tile order, fp32 accumulation) with
gemmtune's epilogue ops fused at the store. Imports triton: load it only through triton_matmul.py."""
from __future__ import annotations

import triton
import triton.language as tl

# Epilogue op codes: each EPi slot holds one, applied in order (0: empty slot).
OP_CODES = {"relu": 1, "gelu": 2, "add": 3, "beta": 4, "alpha": 5, "bias_row": 6, "bias_col": 7}
SLOTS = 4


def _config(bm: int, bn: int, bk: int, stages: int, warps: int) -> triton.Config:
    return triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}, num_stages=stages,
                         num_warps=warps)


# Per input type: 16-bit configs from the tutorial's CUDA list plus Hopper-sized tiles; fp32 (IEEE
# products on CUDA cores) smaller K steps, as the fp32 accumulators and operands share registers.
CONFIGS = {
    "16bit": [_config(128, 256, 64, 3, 8), _config(256, 128, 64, 3, 8), _config(128, 128, 64, 4, 8),
              _config(128, 128, 64, 4, 4), _config(64, 256, 32, 4, 4), _config(128, 128, 32, 4, 4),
              _config(128, 64, 32, 4, 4), _config(64, 128, 32, 4, 4)],
    "fp32": [_config(128, 128, 32, 3, 8), _config(128, 128, 16, 4, 8), _config(128, 64, 32, 4, 4),
             _config(64, 128, 32, 4, 4), _config(128, 256, 16, 3, 8), _config(64, 64, 32, 4, 4)],
}


@triton.jit
def _apply(v, code: tl.constexpr, c, bias_row, bias_col, alpha, beta):
    if code == 1:
        v = tl.maximum(v, 0.0)
    elif code == 2:  # gelu, tanh form; tanh(u) = 2·sigmoid(2u) − 1
        u = 0.7978845608028654 * (v + 0.044715 * v * v * v)
        v = 0.5 * v * (2.0 * tl.sigmoid(2.0 * u))
    elif code == 3:
        v = v + c
    elif code == 4:
        v = v + beta * c
    elif code == 5:
        v = v * alpha
    elif code == 6:
        v = v + bias_row[:, None]
    elif code == 7:
        v = v + bias_col[None, :]
    return v


def _kernel(a_ptr, b_ptr, d_ptr, c_ptr, bias_ptr, alpha, beta, M, N, K,
            stride_am, stride_ak, stride_bk, stride_bn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
            PRECISION: tl.constexpr, HAS_C: tl.constexpr, BIAS: tl.constexpr,
            EP0: tl.constexpr, EP1: tl.constexpr, EP2: tl.constexpr, EP3: tl.constexpr):
    # Grouped order: GROUP_M rows of tiles are walked column by column, so B tiles are reused in L2.
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    group = GROUP_M * num_pid_n
    first_m = (pid // group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group) % group_m
    pid_n = (pid % group) // group_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    # Epilogue in fp32 registers, rounded once at the store.
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    at = offs_m[:, None] * N + offs_n[None, :]
    # Operands an op does not read stay zero tensors, which the compiler drops.
    c = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    bias_row = tl.zeros((BLOCK_M,), dtype=tl.float32)
    bias_col = tl.zeros((BLOCK_N,), dtype=tl.float32)
    if HAS_C:
        c = tl.load(c_ptr + at, mask=mask, other=0.0).to(tl.float32)
    if BIAS == 1:
        bias_row = tl.load(bias_ptr + offs_m, mask=offs_m < M, other=0.0).to(tl.float32)
    if BIAS == 2:
        bias_col = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    v = acc
    v = _apply(v, EP0, c, bias_row, bias_col, alpha, beta)
    v = _apply(v, EP1, c, bias_row, bias_col, alpha, beta)
    v = _apply(v, EP2, c, bias_row, bias_col, alpha, beta)
    v = _apply(v, EP3, c, bias_row, bias_col, alpha, beta)
    tl.store(d_ptr + at, v.to(d_ptr.dtype.element_ty), mask=mask)


KEY = ["M", "N", "K", "PRECISION", "HAS_C", "BIAS", "EP0", "EP1", "EP2", "EP3"]
matmul_16bit = triton.autotune(configs=CONFIGS["16bit"], key=KEY)(triton.jit(_kernel))
matmul_fp32 = triton.autotune(configs=CONFIGS["fp32"], key=KEY)(triton.jit(_kernel))
