"""The untuned evaluation set (bench/bench_untuned.py, issue 34) is kept apart from the shapes the
chooser is trained on (bench/collect_chooser_data.py draws those, seeded, and skips every shape of
the evaluation set)."""
from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _import_bench(*names: str) -> tuple:
    """bench/ scripts imported by name (bench/ is not a package)."""
    import importlib

    sys.path.insert(0, str(BENCH))
    try:
        return tuple(importlib.import_module(name) for name in names)
    finally:
        sys.path.remove(str(BENCH))


def _bench_modules():
    return _import_bench("bench_untuned", "collect_chooser_data")


def test_the_evaluation_set_has_forty_shapes_and_no_training_shape():
    untuned, collect = _bench_modules()
    shapes = untuned.EVAL_SHAPES
    assert len(set(shapes)) == len(shapes) >= 40
    training = set(collect.training_shapes()) | set(collect.extra_shapes())
    assert training and not training & set(shapes)
    assert all(spec.m * spec.n * spec.k and (spec.m, spec.n, spec.k) not in set(shapes)
               for which in ("first", "extra", "small", "wgmma", "wgmma-small-m") for spec in collect.specs(which))


# --- the model-shape suite (bench/model_shapes.py, bench/bench_models.py, issue 67) ---------------------
def _model_modules():
    return _import_bench("model_shapes", "bench_models")


def _chooser_training_shapes() -> set[tuple[int, int, int]]:
    """Every (M, N, K) the chooser was or would be trained on: the collection rounds' draws, the
    timing CSVs `gemmtune db train` read (bench/results/*chooser-rows*), the shipped simulation tables."""
    import csv
    import gzip

    from gemmtune.chooser.training import rows_from_tables

    _, collect = _bench_modules()
    shapes = set(collect.training_shapes()) | set(collect.extra_shapes())
    for which in ("first", "extra", "small", *collect.WGMMA_ROUNDS):
        shapes |= {(spec.m, spec.n, spec.k) for spec in collect.specs(which)}
    for path in sorted((BENCH / "results").glob("*chooser-rows*.csv.gz")):
        with gzip.open(path, "rt", newline="") as handle:
            shapes |= {(int(row["m"]), int(row["n"]), int(row["k"])) for row in csv.DictReader(handle)}
    return shapes | {(row.spec.m, row.spec.n, row.spec.k) for row in rows_from_tables()}


def test_the_model_suite_is_no_chooser_training_shape():
    shapes, _ = _model_modules()
    training = _chooser_training_shapes()
    assert len(training) > 500  # the CSVs were found and read
    assert not {g.shape for g in shapes.suite()} & training


def test_the_model_suite_covers_models_dtypes_epilogues_and_regimes():
    shapes, _ = _model_modules()
    suite = shapes.suite()
    assert len(suite) >= 60 and len({g.model for g in suite}) >= 8
    assert len({(g.model, g.layer, g.m) for g in suite}) == len(suite)  # no GEMM twice
    assert len({(g.shape, g.epilogue) for g in suite}) == len(suite)
    assert {g.epilogue for g in suite} == set(shapes.EPILOGUES)
    assert {g.regime for g in suite} == {"prefill", "decode", "moe"}
    assert set(shapes.DTYPES) == {"bf16", "fp16"}
    assert all(1 <= g.m <= 64 for g in suite if g.regime == "decode")
    assert all(g.m >= 1000 for g in suite if g.regime == "prefill")
    assert all(32 <= g.m <= 2048 for g in suite if g.regime == "moe")
    for g in suite:
        for dtype in shapes.DTYPES:
            spec = g.spec(dtype)
            assert (spec.layout, str(spec.epilogue), spec.k) == ("nt", g.epilogue, g.k)


def test_model_gemms_follow_their_configs():
    shapes, _ = _model_modules()
    by_name = {(g.model, g.layer, g.m): g for g in shapes.suite()}
    # GQA: k/v are kv_heads x head_dim wide; o_proj and down_proj end in the residual add.
    assert by_name["Llama-3-70B", "k_proj/v_proj", 2048].shape == (2048, 1024, 8192)
    assert by_name["Llama-3-8B", "o_proj", 8192].epilogue == "add"
    assert by_name["Llama-3-8B", "gate_proj/up_proj", 32].epilogue == "none"  # SwiGLU: not an epilogue yet
    assert by_name["Qwen2.5-7B", "k_proj/v_proj", 1].epilogue == "bias_col"
    assert by_name["ViT-B/16", "mlp.fc2", 6304].shape == (32 * 197, 768, 3072)
    assert by_name["ViT-B/16", "mlp.fc2", 6304].epilogue == "bias_col+add"
    assert by_name["BERT-large", "intermediate.dense", 4096].epilogue == "bias_col+gelu"
    assert by_name["Whisper-large-v3", "self_attn.k_proj", 1500].epilogue == "none"  # k_proj has no bias
    assert by_name["T5-large", "DenseReluDense.wi", 2048].epilogue == "relu"
    assert by_name["DeepSeek-V3", "experts.gate_proj/up_proj", 48].shape == (48, 2048, 7168)  # 1536 x 8 / 256
    assert by_name["DeepSeek-V3", "kv_a_proj_with_mqa", 2048].n == 512 + 64


def test_bench_models_lists_the_suite_without_a_gpu(capsys):
    shapes, bench = _model_modules()
    assert bench.main(["--list"]) == 0
    text = capsys.readouterr().out
    assert f"{2 * len(shapes.suite())} cases: {len(shapes.suite())} GEMMs" in text
    assert bench.main(["--list", "--subset", "quick", "--dtypes", "bf16", "--peers", "eager,compile"]) == 0
    quick = capsys.readouterr().out
    assert f"{len(shapes.QUICK)} cases" in quick and f"{len(shapes.QUICK)} with the compile peer" in quick


def test_the_quick_subset_names_existing_gemms_of_every_regime_and_epilogue():
    shapes, _ = _model_modules()
    quick = shapes.quick_suite()
    assert len(quick) == len(shapes.QUICK)
    assert {g.regime for g in quick} == set(shapes.REGIMES) and {g.epilogue for g in quick} == set(shapes.EPILOGUES)


def test_the_torch_float64_epilogues_match_gemmtune_references():
    import numpy as np
    import torch

    _, bench = _model_modules()
    rng = np.random.default_rng(3)
    product, bias, c = rng.normal(size=(5, 7)) * 3, rng.normal(size=7), rng.normal(size=(5, 7))
    from gemmtune.epilogue import Epilogue

    for text in ("none", "bias_col", "bias_col+gelu", "bias_col+relu", "relu", "add", "bias_col+add"):
        epilogue = Epilogue.parse(text)
        operands = {k: v for k, v in (("bias", bias), ("C", c)) if k in {o.name for o in epilogue.operands()}}
        ours = bench.epilogue64(torch, epilogue, torch.from_numpy(product),
                                {k: torch.from_numpy(v) for k, v in operands.items()})
        np.testing.assert_allclose(ours.numpy(), epilogue.reference(product, operands), rtol=1e-12, atol=1e-12)


def test_the_peers_model_function_computes_the_epilogue():
    """Eager's function (F.linear, activation, + residual) passes gemmtune's check against the
    float64 reference, for every epilogue of the suite; a wrong activation would not."""
    import torch

    shapes, bench = _model_modules()
    from gemmtune.epilogue import Epilogue
    from gemmtune.spec import GemmSpec

    for text in shapes.EPILOGUES:
        spec = GemmSpec(24, 40, 64, "nt", "bf16", Epilogue.parse(text))
        x = bench.make_operands(torch, spec, seed=1, device="cpu")
        expected = bench.epilogue64(torch, spec.epilogue, bench.product64(x), x.named())
        out = bench.model_function(torch, spec.epilogue)(x.x, x.w, x.bias, x.residual)
        assert bench.judge(out, spec, expected, 1 + len(spec.epilogue.ops)) == "ok", text
    wrong = Epilogue.parse("bias_col+relu")
    spec = GemmSpec(24, 40, 64, "nt", "bf16", Epilogue.parse("bias_col+gelu"))
    x = bench.make_operands(torch, spec, seed=1, device="cpu")
    out = bench.model_function(torch, wrong)(x.x, x.w, x.bias, x.residual)
    expected = bench.epilogue64(torch, spec.epilogue, bench.product64(x), x.named())
    assert bench.judge(out, spec, expected, 3) != "ok"


def test_bench_models_ratios_are_peer_time_over_ours_per_round():
    shapes, bench = _model_modules()
    fused, plain = (next(g for g in shapes.suite() if (g.epilogue != "none") == want) for want in (True, False))
    times = {bench.CUBLAS: [2.0, 4.0, 2.0], bench.PLAIN: [1.0, 4.0, 2.0], bench.FUSED: [4.0, 4.0, 4.0],
             bench.EAGER: [8.0, 6.0, 4.0]}
    with_epilogue = bench.Outcome(bench.Case(fused, "bf16"), times, {}, {bench.PLAIN: "-", bench.FUSED: "-"})
    got = {r.name: bench.ratio(with_epilogue, r) for r in bench.RATIOS}
    assert got == {"plain vs cuBLAS": 1.0, "fused vs eager": 1.5, "fused vs compile": None, "fused vs cuBLAS": 0.5}
    # Without an epilogue ours fused is ours plain and eager is cuBLAS.
    bare = bench.Outcome(bench.Case(plain, "fp16"), {k: times[k] for k in (bench.CUBLAS, bench.PLAIN)}, {},
                         {bench.PLAIN: "-"})
    assert bench.ratio(bare, bench.RATIOS[1]) == bench.ratio(bare, bench.RATIOS[0]) == 1.0
    text = bench.summary_text([with_epilogue, bare])
    assert "| all | 1.000 (min 1.000, n=2)" in text and "| bf16 | 1.000 (min 1.000, n=1) | 1.500" in text
    assert ("fused vs eager (rows with an epilogue): geomean >= 1.15, none < 1.00: geomean 1.500, min 1.500: "
            "**met**") in text
    assert "plain vs cuBLAS: geomean >= 1.05, none < 0.90: geomean 1.000, min 1.000: **not met**" in text


def _null_device(monkeypatch, bench, wrong: str):
    """bench_models on the CPU: tensors on "cpu", torch's launches called directly, our kernels
    stand-ins that write the float64 reference (or, for the spec named `wrong`, a wrong D), and
    paired timing that runs every launch once and reports fixed times per round."""
    import types

    import torch

    import gemmtune.device
    import gemmtune.timing

    def bind(kernel, operands, out, loaded):
        def launch():
            d = bench.epilogue64(torch, kernel.spec.epilogue, bench.product64(operands), operands.named())
            out.copy_(d + (1.0 if str(kernel.spec.epilogue) == wrong else 0.0))
        return launch

    def paired(calls, rounds, l2_bytes, protocol, lead_s=0.0):
        seconds = {bench.CUBLAS: 2.0, bench.PLAIN: 1.0, bench.FUSED: 1.0, bench.EAGER: 3.0, bench.UNTUNED: 1.5}
        for call in calls.values():
            call()
        return {name: [seconds[name] * (1 + i % 2) for i in range(rounds)] for name in calls}

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(bench, "bind_ours", bind)
    monkeypatch.setattr(bench, "graph_replay", lambda torch, call: (call, call()))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(gemmtune.timing, "measure_alternating", paired)
    monkeypatch.setattr(gemmtune.device, "query_device", lambda ordinal=0: types.SimpleNamespace(l2_bytes=1 << 20))


def _fake_built(bench, case):
    import types

    def kernel(spec):
        config = types.SimpleNamespace(describe=lambda: "tile 64x64")
        return bench.Built(types.SimpleNamespace(spec=spec, family="fake", config=config, config_source="chooser (x)"))
    return {spec: kernel(spec) for spec in (case.spec(False), case.spec(True))}


def test_a_case_runs_on_a_null_device_and_a_wrong_kernel_is_not_timed(monkeypatch):
    import dataclasses

    shapes, bench = _model_modules()
    gemm = dataclasses.replace(next(g for g in shapes.suite() if g.epilogue == "bias_col+gelu"), m=24, n=40, k=64)
    case = bench.Case(gemm, "bf16")
    settings = bench.RunSettings(rounds=4, flush="read", lead_us=0.0, peers="cuBLAS, eager", commit="test")

    _null_device(monkeypatch, bench, wrong="none")
    outcome = bench.run_case(case, _fake_built(bench, case), settings)
    assert outcome.checks[bench.CUBLAS] == outcome.checks[bench.FUSED] == outcome.checks[bench.EAGER] == "ok"
    assert outcome.checks[bench.PLAIN] != "ok" and bench.PLAIN not in outcome.times  # wrong: checked, not timed
    assert bench.ratio(outcome, bench.RATIOS[1]) == 3.0 and bench.ratio(outcome, bench.RATIOS[0]) is None

    _null_device(monkeypatch, bench, wrong="")
    outcome = bench.run_case(case, _fake_built(bench, case), settings)
    assert set(outcome.checks.values()) == {"ok"} and set(outcome.times) == {bench.CUBLAS, bench.PLAIN, bench.FUSED,
                                                                             bench.EAGER}
    assert [bench.ratio(outcome, r) for r in bench.RATIOS] == [2.0, 3.0, None, 2.0]
    text = bench.table_text([outcome], ["# header"])
    assert "| ViT-B/16 | mlp.fc1 | prefill | 24x40x64 | bias_col+gelu | fake tile 64x64 (chooser) |" in text
    assert outcome.to_json()["ratios"]["fused vs eager"] == 3.0
    assert "Tuned vs untuned" not in bench.summary_text([outcome])

    built = _fake_built(bench, case)  # --tune-s: the untuned plain kernel timed in the same rounds
    built[bench.UNTUNED, case.spec(False)] = built[case.spec(False)]
    outcome = bench.run_case(case, built, settings)
    assert bench.ratio(outcome, bench.TUNED_VS_UNTUNED) == 1.5 and bench.UNTUNED in outcome.kernels
    assert "Tuned vs untuned (ours from an empty database, timed in the same rounds): geomean 1.500" in \
        bench.summary_text([outcome])


def test_the_tuning_bar_takes_the_largest_gemms_plain_and_tunes_them_with_the_cli():
    """bench_models --largest N --tune-s S (issue 67's tuning bar): the N distinct shapes of most FLOPs, each once
    per dtype and without its epilogue; the tune command is one the CLI's parser takes."""
    (models,) = _import_bench("bench_models")
    from gemmtune.cli import build_parser

    cases = models.select_cases("all", None, None, "bf16,fp16", None, ("eager",), "quick")
    largest = models.largest_cases(cases, 10)
    def flops(shape):
        return shape[0] * shape[1] * shape[2]

    chosen = {c.gemm.shape for c in largest}
    assert len(largest) == 20 and len(chosen) == 10 and {c.dtype for c in largest} == {"bf16", "fp16"}
    assert min(map(flops, chosen)) >= max(flops(c.gemm.shape) for c in cases if c.gemm.shape not in chosen)
    assert all(c.gemm.epilogue == "none" and not c.fused and not c.with_compile for c in largest)
    assert len({(c.gemm.shape, c.dtype) for c in largest}) == 20
    spec = largest[0].spec(False)
    args = build_parser().parse_args(models.tune_command(spec, 60, Path("t.sqlite"))[3:])
    assert (args.time_s, args.dtype, args.layout, str(args.db)) == (60.0, spec.dtype, "nt", "t.sqlite")
