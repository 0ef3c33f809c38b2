"""What an exported gated (SwiGLU) GEMM says and checks differently: B holds 2N rows, gate and up interleaved by 8.

D = silu(A·Wgᵀ) ⊙ (A·Wuᵀ), D M×N; B (layout nt) is the (2N)×K weight of gemmtune.epilogue.interleave_gate_up:
for D's columns [8q, 8q+8) the gate rows are B's rows [16q, 16q+8) and the up rows [16q+8, 16q+16). The header's
launcher comment and README say so, the harness allocates 2N·K elements of B, and the reference kernel sums the
gate and up products of each output in double before SwiGLU (kernels/wgmma/gated.py is the tuned kernel's side).
"""
from __future__ import annotations

from ..epilogue import GATE_ROWS
from ..spec import GemmSpec

FORMULA = "silu(A·Wgᵀ) ⊙ (A·Wuᵀ)"


def weight_layout(spec: GemmSpec) -> str:
    """How B's rows hold the gate and up weights, in words (a gated spec only)."""
    pair = 2 * GATE_ROWS
    return (f"gate and up rows interleaved by {GATE_ROWS}: for D's columns [{GATE_ROWS}q, {GATE_ROWS}q+{GATE_ROWS}) "
            f"the gate rows are B's rows [{pair}q, {pair}q+{GATE_ROWS}) and the up rows [{pair}q+{GATE_ROWS}, "
            f"{pair}q+{pair}) (gemmtune.torch.interleave_gate_up(w_gate, w_up) builds it)")


def b_elements(spec: GemmSpec) -> str:
    """C expression of B's element count in main.cu (K, N: the harness's constants)."""
    return "(size_t)K * (2 * N)" if spec.gated else "(size_t)K * N"


def info_rows(spec: GemmSpec) -> str:
    """The info namespace's line on B's rows, before its FLOPs (a gated spec only)."""
    return (f"constexpr int WEIGHT_ROWS = 2 * N;  // B's rows: gate and up interleaved by {GATE_ROWS}\n"
            if spec.gated else "")


def info_flag(spec: GemmSpec) -> str:
    """The info namespace's `gated` flag (every export has it, so a program can check it)."""
    return f"constexpr bool gated = true;  // D = {FORMULA}\n" if spec.gated else "constexpr bool gated = false;\n"


def reference_sum(a: str, b_gate: str, b_up: str) -> str:
    """The reference kernel's sums for output (row, col) and its SwiGLU, leaving the float result in `v`: `a` reads
    A's element p of the row, `b_gate` / `b_up` B's element p of rows `gate_row` / `up_row` (declared here)."""
    return f"""    const int gate_row = {2 * GATE_ROWS} * (col / {GATE_ROWS}) + col % {GATE_ROWS}, up_row = gate_row + {GATE_ROWS};
    double gate = 0.0, up = 0.0;
    for (int p = 0; p < K; ++p) {{
        const double a_p = (double){a};
        gate += a_p * (double){b_gate};
        up += a_p * (double){b_up};
    }}
    float v = (float)(gate / (1.0 + exp(-gate)) * up);  // SwiGLU in double (exp(-gate) = inf: -0), rounded once
"""
