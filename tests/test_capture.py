"""capture.py on CPU: the GEMMs a torch model runs become a Workload with layouts from strides,
epilogues from addmm's input and the activation that follows, counts merged; model files and input
texts are refused with one line."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from gemmtune.capture import capture, capture_with_notes, from_torch, load_model_spec, parse_input  # noqa: E402
from gemmtune.errors import SpecError  # noqa: E402
from gemmtune.input_files import InputFileError  # noqa: E402
from gemmtune.spec import GemmSpec  # noqa: E402


def mlp(dtype: torch.dtype = torch.float32) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32)).to(dtype)


def summary(workload) -> list[tuple[str, int]]:
    return [(s.spec.short(), s.count) for s in workload.shapes]


def test_mlp_layers_are_nt_with_bias_and_fused_relu():
    workload = capture(mlp(), torch.randn(8, 64))
    assert [s.spec for s in workload.shapes] == [GemmSpec(8, 128, 64, "nt", "fp32", "bias_col+relu"),
                                                GemmSpec(8, 32, 128, "nt", "fp32", "bias_col")]
    assert [s.count for s in workload.shapes] == [1, 1]
    assert all(s.share is None for s in workload.shapes)


def test_calls_of_the_same_gemm_are_merged_into_a_count():
    model = mlp()
    workload = capture(lambda x: (model(x), model(x)), torch.randn(8, 64))
    assert summary(workload) == [("8x128x64 nt fp32 bias_col+relu", 2), ("8x32x128 nt fp32 bias_col", 2)]


def test_three_d_input_fuses_through_the_view():
    # nn.Linear on (2, 8, 64) views the input to (16, 64), runs addmm, and views the result back
    # before the ReLU sees it.
    assert summary(capture(mlp(), torch.randn(2, 8, 64))) == [("16x128x64 nt fp32 bias_col+relu", 1),
                                                              ("16x32x128 nt fp32 bias_col", 1)]


def test_bf16_model_records_bf16():
    workload = capture(mlp(torch.bfloat16), torch.randn(8, 64, dtype=torch.bfloat16))
    assert {s.spec.dtype for s in workload.shapes} == {"bf16"}
    assert capture(torch.mm, torch.randn(4, 8, dtype=torch.float16),
                   torch.randn(8, 2, dtype=torch.float16)).shapes[0].spec.dtype == "fp16"


def test_layouts_come_from_strides():
    a, w, b = torch.randn(16, 32), torch.randn(8, 32), torch.randn(32, 8)
    assert capture(torch.mm, a, b).shapes[0].spec.layout == "nn"
    assert capture(torch.mm, a, w.t()).shapes[0].spec.layout == "nt"
    at = torch.randn(32, 16)
    shape = capture(lambda: at.t() @ b).shapes[0].spec
    assert (shape.m, shape.n, shape.k, shape.layout) == (16, 8, 32, "tn")
    assert capture(torch.mm, at.t(), w.t()).shapes[0].spec.layout == "tt"
    # A slice that is neither row- nor column-major: recorded as the contiguous copy it needs.
    assert capture(torch.mm, torch.randn(16, 64)[:, ::2], b).shapes[0].spec.layout == "nn"


def test_bmm_records_one_gemm_per_batch():
    workload = capture(torch.bmm, torch.randn(4, 16, 32), torch.randn(4, 32, 8))
    assert summary(workload) == [("16x8x32 nn fp32", 4)]
    assert summary(capture(torch.matmul, torch.randn(4, 16, 32), torch.randn(4, 32, 8))) == [("16x8x32 nn fp32", 4)]


def test_addmm_and_baddbmm_inputs():
    a, b = torch.randn(16, 32), torch.randn(32, 8)
    assert capture(torch.addmm, torch.randn(16, 8), a, b).shapes[0].spec.short() == "16x8x32 nn fp32 add"
    assert capture(torch.addmm, torch.randn(16, 1), a, b).shapes[0].spec.short() == "16x8x32 nn fp32 bias_row"
    workload, notes = capture_with_notes(torch.addmm, torch.randn(16, 8), a, b, beta=0.5)
    assert workload.shapes[0].spec.short() == "16x8x32 nn fp32" and len(notes) == 1
    workload = capture(torch.baddbmm, torch.randn(4, 16, 8), torch.randn(4, 16, 32), torch.randn(4, 32, 8))
    assert summary(workload) == [("16x8x32 nn fp32 add", 4)]


def test_tanh_gelu_fuses_and_erf_gelu_does_not():
    x, w, bias = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    tanh = capture(lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"))
    assert summary(tanh) == [("8x32x64 nt fp32 bias_col+gelu", 1)]
    assert summary(capture(lambda: F.gelu(F.linear(x, w)))) == [("8x32x64 nt fp32", 1)]
    # Only the op applied directly to the GEMM output fuses: a ReLU after a scalar add does not.
    assert summary(capture(lambda: F.relu(F.linear(x, w) + 1))) == [("8x32x64 nt fp32", 1)]
    assert summary(capture(lambda: F.relu(x @ w.t(), inplace=True))) == [("8x32x64 nt fp32 relu", 1)]


def test_attention_layers_show_their_gemms():
    # The MHA fast path (eval, no grad) would hide every GEMM in one op; capture turns it off meanwhile.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()
    workload, notes = capture_with_notes(layer, torch.randn(2, 10, 64))
    # The in-projection runs as mm + add(bias) on a transposed input: the add is fused as bias_col.
    assert summary(workload) == [("20x192x64 nt fp32 bias_col", 1), ("20x64x64 nt fp32 bias_col", 1),
                                 ("20x128x64 nt fp32 bias_col+relu", 1), ("20x64x128 nt fp32 bias_col", 1)]
    assert any("_scaled_dot_product" in note for note in notes)
    assert torch.backends.mha.get_fastpath_enabled()


def test_bias_add_fuses_only_a_column_vector():
    x, w, bias = torch.randn(8, 64), torch.randn(32, 64), torch.randn(32)
    half, matrix = torch.randn(16), torch.randn(8, 32)  # made before the capture: no op between mm and add
    assert summary(capture(lambda: F.relu(x @ w.t() + bias))) == [("8x32x64 nt fp32 bias_col+relu", 1)]
    # A view that splits the columns: the vector's index is no longer the column.
    assert summary(capture(lambda: (x @ w.t()).view(8, 2, 16) + half)) == [("8x32x64 nt fp32", 1)]
    assert summary(capture(lambda: x @ w.t() + matrix)) == [("8x32x64 nt fp32", 1)]


def test_float64_is_skipped_with_a_note():
    workload, notes = capture_with_notes(torch.mm, torch.randn(4, 8, dtype=torch.float64),
                                         torch.randn(8, 2, dtype=torch.float64))
    assert workload.shapes == ()
    assert len(notes) == 1 and "float64" in notes[0] and "\n" not in notes[0]


def model_file(tmp_path, body: str):
    path = tmp_path / "model.py"
    path.write_text(body)
    return path


@pytest.mark.parametrize("body, attribute, words", [
    (None, "make", "no such file"),
    ("x = 1\n", "", "path/to/model.py:factory_name"),
    ("x = 1\n", "make", "no attribute 'make'"),
    ("make = 3\n", "make", "not callable"),
    ("import torch\nraise ValueError('bad\\nweights')\n", "make", "ValueError: bad weights"),
    ("def make(:\n", "make", "SyntaxError"),
])
def test_load_model_spec_refuses_with_one_line(tmp_path, body, attribute, words):
    path = tmp_path / "model.py" if body is None else model_file(tmp_path, body)
    text = f"{path}:{attribute}" if attribute else str(path)
    with pytest.raises(InputFileError) as info:
        load_model_spec(text)
    assert words in str(info.value) and "\n" not in str(info.value)


def test_from_torch_end_to_end(tmp_path):
    path = model_file(tmp_path, "from dataclasses import dataclass\nimport torch\n\n\n@dataclass\nclass Size:\n"
                                "    width: int = 64\n\n\ndef make():\n"
                                "    return torch.nn.Sequential(torch.nn.Linear(Size().width, 16), torch.nn.ReLU())\n")
    workload, notes = from_torch(f"{path}:make", ["4x64"])
    assert summary(workload) == [("4x16x64 nt fp32 bias_col+relu", 1)] and notes == []
    with pytest.raises(InputFileError, match="RuntimeError") as info:
        from_torch(f"{path}:make", ["4x63"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text", ["", "4x", "x4", "4x0", "4x64:int8", "4x64:", "4,64", "4x64:bf16:2", "-4x64"])
def test_parse_input_refuses_malformed_text(text):
    with pytest.raises(SpecError):
        parse_input(text)


def test_parse_input_builds_random_tensors():
    tensor = parse_input("2x16x4096:bf16")
    assert tuple(tensor.shape) == (2, 16, 4096) and tensor.dtype == torch.bfloat16
    assert parse_input("3").dtype == torch.float32 and parse_input("4X8:FP16").dtype == torch.float16


def test_the_llama_example_records_its_projections_on_the_meta_device():
    """examples/llama_layer.py at batch·sequence 2048, shapes only (nothing computed on meta)."""
    from gemmtune.capture import from_torch

    example = Path(__file__).resolve().parents[1] / "examples" / "llama_layer.py"
    workload, _ = from_torch(f"{example}:make_model", ["2048x4096:bf16"], device="meta")
    found = {(s.spec.m, s.spec.n, s.spec.k, s.spec.layout, s.spec.dtype): s.count for s in workload.shapes}
    assert found == {(2048, 4096, 4096, "nt", "bf16"): 2, (2048, 1024, 4096, "nt", "bf16"): 2,
                     (2048, 14336, 4096, "nt", "bf16"): 2, (2048, 4096, 14336, "nt", "bf16"): 1}
