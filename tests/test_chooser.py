"""The config chooser without a GPU: deterministic, loads from its file, explains itself, and every
pick compiles; split-K and gemv configs are judged by their constraints; training learns."""
import json
import math

import numpy as np
import pytest

from gemmtune.chooser import EXPLAINED, choose, explain, rank, rank_configs, split_tail
from gemmtune.chooser.candidates import candidates
from gemmtune.chooser.features import blocks_per_sm, features, geometry
from gemmtune.chooser.model import MODEL_PATH, TrainingRow, feature_matrix, load, save, train, train_family
from gemmtune.chooser.training import rows_from_csv, rows_from_tables
from gemmtune.compiler import compile_kernel
from gemmtune.errors import GemmtuneError
from gemmtune.kernels import family_for, get_family
from gemmtune.kernels.gemv.config import GemvConfig, stream_kind
from gemmtune.kernels.gemv.config import supports as gemv_supports
from gemmtune.kernels.simt.config import SimtConfig, ladder, rejections
from gemmtune.kernels.simt.render import render
from gemmtune.kernels.wgmma.config import WgmmaConfig
from gemmtune.spec import GemmSpec

CORE_SHAPES = [(1, 1, 1), (7, 13, 5), (127, 129, 131), (1000, 1000, 1000), (4092, 4092, 4092), (3000, 5000, 700)]


def test_ranking_is_deterministic_and_covers_every_candidate():
    spec = GemmSpec(777, 3333, 1536, math="simt")  # (auto runs it as 3xtf32 on wgmma, staged)
    first, again = rank(spec, "sm_90"), rank(spec, "sm_90")
    assert [p.config for p in first] == [p.config for p in again]
    assert {p.config for p in first} == set(candidates("simt", spec, "sm_90", 132))
    assert [p.predicted_s for p in first] == sorted(p.predicted_s for p in first)


def test_shipped_model_loads_without_a_gpu_and_round_trips(tmp_path):
    model = load()
    if model is None:
        pytest.skip("no chooser model shipped yet")
    assert {"simt", "wgmma", "gemv"} <= set(model.families)
    save(model, tmp_path / "m.json")
    again = load(tmp_path / "m.json")
    spec = GemmSpec(1000, 1000, 1000)
    configs = candidates("simt", spec, "sm_90", 132)
    x, _ = feature_matrix([(spec, c, 132) for c in configs], model.families["simt"].feature_names)
    np.testing.assert_allclose(model.families["simt"].predict_log_ratio(x), again.families["simt"].predict_log_ratio(x))
    assert MODEL_PATH.stat().st_size < 200_000  # a small file


def test_a_broken_model_file_is_one_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text(json.dumps({"version": 1, "families": {"simt": {"family": "simt"}}}))
    with pytest.raises(GemmtuneError, match="is not a chooser model"):
        load(bad)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_pick_for_the_core_shapes_compiles(dtype):
    layouts = ("nn", "nt", "tn", "tt") if dtype == "fp32" else ("nt", "nn")
    arch = "sm_90a" if dtype == "bf16" else "sm_90"
    for shape in CORE_SHAPES + [(1, 4096, 4096), (4096, 1, 4096), (16, 4096, 4096)]:
        for layout in layouts:
            spec = GemmSpec(*shape, layout=layout, dtype=dtype)
            try:
                family = family_for(spec, arch)
            except GemmtuneError:
                assert dtype == "bf16"  # e.g. K=5: rows of 10 bytes, which TMA cannot read
                continue
            pick = choose(spec, arch)
            assert pick.family == family.name
            compiled = compile_kernel(family.render(spec, pick.config, arch), arch)
            assert compiled.resources.spills == 0, (spec.short(), pick.config.describe())


def test_explain_names_the_pick_and_its_reasons():
    text = explain(rank(GemmSpec(64, 4096, 4096, math="simt"), "sm_90"))
    assert text.startswith("chooser: simt") and "waves" in text and "B/FLOP" in text and "candidates ranked" in text


def test_skinny_shape_gets_split_k_and_big_shape_does_not():
    assert choose(GemmSpec(32, 4096, 8192, math="simt"), "sm_90").config.split_k > 1
    assert choose(GemmSpec(16, 4096, 8192), "sm_90").family == "gemv"
    assert choose(GemmSpec(8192, 8192, 2048, math="simt"), "sm_90").config.split_k == 1


def test_wave_quantization_and_tile_waste_features():
    spec, config = GemmSpec(64, 4096, 4096), dict(ladder())["double_buffer"]  # 128x128 tiles, 256 threads
    f = features(spec, config, 132)
    per_sm = blocks_per_sm(geometry(spec, config, 132))
    assert f["waves"] == pytest.approx(32 / (per_sm * 132)) and f["tile_waste"] == pytest.approx(0.5)
    split = features(spec, config.with_(split_k=4), 132)
    assert split["waves"] == pytest.approx(4 * f["waves"]) and split["bytes_per_flop"] > f["bytes_per_flop"]


def test_training_learns_the_recorded_table_order():
    """Fit on one recorded table, predict its configs: the ranking must follow the measurements."""
    rows = [r for r in rows_from_tables() if (r.spec.m, r.spec.n, r.spec.k) == (1024, 1024, 1024)]
    model = train(rows)
    fam = model.families["simt"]
    x, _ = feature_matrix([(r.spec, r.config, r.sm_count) for r in rows], fam.feature_names)
    predicted = fam.predict_log_ratio(x)
    measured = np.log([r.median_s for r in rows])
    rank_corr = np.corrcoef(np.argsort(np.argsort(predicted)), np.argsort(np.argsort(measured)))[0, 1]
    assert rank_corr > 0.7
    top = np.argsort(predicted)[:10]
    assert measured[top].min() <= np.quantile(measured, 0.05)  # the predicted top 10 hold a top-5% config


def test_a_model_of_several_seeds_predicts_their_average():
    rows = [r for r in rows_from_tables() if (r.spec.m, r.spec.n, r.spec.k) == (1024, 1024, 1024)]
    x, _ = feature_matrix([(r.spec, r.config, r.sm_count) for r in rows])
    singles = [train_family("simt", rows, seed=s).predict_log_ratio(x) for s in (3, 4, 5)]
    averaged = train_family("simt", rows, seed=3, seeds=3)
    assert len(averaged.trees) == 3 * len(train_family("simt", rows).trees)
    assert np.allclose(averaged.predict_log_ratio(x), np.mean(singles, axis=0))
    assert not np.allclose(singles[0], singles[1])  # the seeds do differ


def test_training_csv_round_trip(tmp_path):
    spec, config = GemmSpec(300, 400, 500), SimtConfig(split_k=2)
    path = tmp_path / "rows.csv"
    path.write_text("family,m,n,k,layout,dtype,config,median_s,status,gpu,sm_count\n"
                    f"simt,300,400,500,nn,fp32,\"{json.dumps(config.to_json()).replace(chr(34), chr(34) * 2)}\","
                    "1e-4,ok,H100,132\nsimt,300,400,500,nn,fp32,{},,wrong,H100,132\n")
    rows = rows_from_csv(path)
    assert rows == [TrainingRow("simt", spec, config, 132, 1e-4, str(path))]
    path.write_text("not,a,table\n1,2,3\n")
    with pytest.raises(GemmtuneError, match="is not a chooser timing CSV"):
        rows_from_csv(path)


def _timing_csv(path, family, config, spec, seconds):
    cell = json.dumps(config.to_json()).replace(chr(34), chr(34) * 2)
    path.write_text("family,m,n,k,layout,dtype,config,median_s,status,gpu,sm_count\n" + "".join(
        f"{family},{spec.m},{spec.n},{k},{spec.layout},{spec.dtype},\"{cell}\",{t},ok,H100,132\n"
        for k, t in zip(range(64, 64 * (len(seconds) + 1), 64), seconds)))
    return path


def test_only_latest_keeps_a_familys_rows_from_its_newest_csv(tmp_path):
    """`db train --only-latest wgmma`: the wgmma rows of older CSVs and of the tables are left out,
    the other families' rows stay; a family no CSV holds is one clear error."""
    from gemmtune.chooser.training import only_latest

    spec = GemmSpec(512, 512, 64, "nt", "bf16")
    old = _timing_csv(tmp_path / "old.csv", "wgmma", WgmmaConfig(), spec, [1e-5] * 9)
    simt = _timing_csv(tmp_path / "simt.csv", "simt", SimtConfig(), GemmSpec(512, 512, 64), [2e-5] * 9)
    new = _timing_csv(tmp_path / "new.csv", "wgmma", WgmmaConfig(bm=64, bn=64, consumers=1), spec, [3e-5] * 9)
    paths = [old, simt, new]
    rows = [r for p in paths for r in rows_from_csv(p)] + rows_from_tables()
    kept = only_latest(rows, paths, ("wgmma",))
    assert {r.source for r in kept if r.family == "wgmma"} == {str(new)}
    assert [r for r in kept if r.family != "wgmma"] == [r for r in rows if r.family != "wgmma"]
    with pytest.raises(GemmtuneError, match="no --csv file holds gemv rows"):
        only_latest(rows, paths, ("gemv",))


def test_only_latest_keeps_every_csv_of_the_newest_date(tmp_path):
    """Two rounds timed on one date (the file names' YYYY-MM-DD) both stay; an older date's go."""
    from gemmtune.chooser.training import only_latest

    spec = GemmSpec(512, 512, 64, "nt", "bf16")
    older = _timing_csv(tmp_path / "2026-11-23-rows.csv", "wgmma", WgmmaConfig(), spec, [1e-5] * 9)
    first = _timing_csv(tmp_path / "2026-11-26-rows.csv", "wgmma", WgmmaConfig(bm=64, bn=64, consumers=1), spec, [2e-5] * 9)
    second = _timing_csv(tmp_path / "2026-11-26-rows-aligned.csv", "wgmma", WgmmaConfig(bn=128), spec, [3e-5] * 9)
    paths = [older, first, second]
    kept = only_latest([r for p in paths for r in rows_from_csv(p)], paths, ("wgmma",))
    assert {r.source for r in kept} == {str(first), str(second)}


def test_training_on_the_shipped_tables_leaves_out_families_without_features(tmp_path):
    """The shipped mma table's rows have no chooser features: db train fits the others, and its report
    counts only the rows a model was fitted on (it had crashed on that table)."""
    from gemmtune.chooser.training import retrain

    assert any(r.family == "mma" for r in rows_from_tables())
    model, report = retrain([], None, tmp_path / "model.json.gz")
    assert "mma" not in model.families and "mma" not in report.per_family and "simt" in model.families
    assert report.rows == sum(report.per_family.values())


def test_retraining_one_family_keeps_the_others(tmp_path):
    from gemmtune.chooser.training import retrain

    out = tmp_path / "model.json.gz"
    out.write_bytes(MODEL_PATH.read_bytes())
    spec = GemmSpec(512, 512, 64, "nt", "bf16")
    rows = _timing_csv(tmp_path / "rows.csv", "wgmma", WgmmaConfig(), spec, [1e-5 * (1 + i) for i in range(9)])
    model, report = retrain([rows], None, out, use_tables=False, families=("wgmma",))
    shipped = load(MODEL_PATH)
    assert report.per_family == {"wgmma": 9} and model.for_family("wgmma").rows == 9
    for name in ("simt", "gemv"):
        assert load(out).for_family(name).to_json() == shipped.for_family(name).to_json()
    with pytest.raises(GemmtuneError, match="no training rows"):
        retrain([rows], None, out, use_tables=False, families=("simt",))
    few = _timing_csv(tmp_path / "few.csv", "wgmma", WgmmaConfig(), spec, [1e-5] * 5)
    with pytest.raises(GemmtuneError, match="no model trained for wgmma: fewer than 8 rows"):
        retrain([few], None, out, use_tables=False, families=("wgmma",))


# --- split-K in simt -------------------------------------------------------------------------------
def test_split_k_is_off_by_default_and_left_out_of_json():
    assert "split_k" not in SimtConfig().to_json() and SimtConfig(split_k=3).to_json()["split_k"] == 3
    assert SimtConfig.from_json(SimtConfig(split_k=3).to_json()).split_k == 3
    assert "split" not in SimtConfig().describe()


def test_split_k_constraints():
    spec = GemmSpec(64, 64, 64)  # 4 k-slices of 16
    assert "split_k" in rejections(SimtConfig(split_k=5), spec)
    assert "split_k" in rejections(SimtConfig(split_k=2, stage_c=True), GemmSpec(64, 64, 64, epilogue="add"))
    assert not rejections(SimtConfig(split_k=4), spec)


def test_split_k_render_takes_turns_in_module_memory():
    spec = GemmSpec(127, 129, 4097, epilogue="relu+add")
    source = render(spec, dict(ladder())["double_buffer"].with_(split_k=3))
    assert source.grid[2] == 3 and "wait_turn" in source.code and "__device__ unsigned int split_turn[" in source.code
    assert source.code.count("epilogue(v, row, col") == 1  # only the last split applies the epilogue
    assert "k_begin + (t + 1) * BK" in source.code


def test_split_k_workspace_config_and_constraints():
    ws = SimtConfig(split_k=8, split_reduce="workspace")
    assert "split_reduce" not in SimtConfig(split_k=8).to_json() and ws.to_json()["split_reduce"] == "workspace"
    assert SimtConfig.from_json(ws.to_json()) == ws and ws.describe().endswith("splitK8 workspace")
    spec = GemmSpec(256, 256, 4096)
    assert not rejections(ws, spec)
    assert "split_reduce" in rejections(ws.with_(split_k=1), spec)  # a twin of the plain kernel
    assert "split_reduce" in rejections(ws.with_(split_reduce="atomic"), spec)
    assert "split_reduce" in rejections(ws.with_(split_k=32), GemmSpec(8192, 8192, 65536))  # 8 GiB of partials


def test_split_k_workspace_render_sums_in_split_order():
    spec = GemmSpec(127, 129, 4097, epilogue="relu+add")
    config = dict(ladder())["double_buffer"].with_(split_k=6, split_reduce="workspace")
    code = render(spec, config).code
    assert "split_turn" not in code and "__device__ float4 split_partials[TILES_M * TILES_N * SPLITS * PARTS * THREADS]" in code
    assert "atomicAdd(&split_arrivals[tile], 1u) == SPLITS - 1" in code and "split_arrivals[tile] = 0" in code
    assert "for (int z = 0; z < SPLITS; ++z)" in code  # a fixed order, not the arrival order
    one = render(GemmSpec(100, 100, 4096), dict(ladder())["smem_tiling"].with_(split_k=4, split_reduce="workspace"))
    assert "__device__ float split_partials[" in one.code  # one sum per thread: float accesses


def test_split_k_workspace_candidates_compile_without_spills(tmp_path):
    spec = GemmSpec(200, 300, 4104)
    found = [c for c in candidates("simt", spec, "sm_90", 132) if c.split_reduce == "workspace"]
    assert {c.split_k for c in found} >= {2, 8, 16}
    for config in {(c.bm, c.bn, c.bk, c.tm, c.tn, c.wm, c.wn): c for c in found}.values():  # one per tile
        assert compile_kernel(render(spec, config.with_(split_k=16)), "sm_90", tmp_path).resources.spills == 0


# --- gemv ------------------------------------------------------------------------------------------
def test_gemv_takes_one_column_or_a_few_rows():
    assert gemv_supports(GemmSpec(1, 4096, 4096), "sm_90") is None
    assert gemv_supports(GemmSpec(16, 4096, 4096), "sm_90") is None
    assert gemv_supports(GemmSpec(4096, 1, 4096, dtype="bf16"), "sm_80") is None
    assert "N = 1 or M ≤ 16" in gemv_supports(GemmSpec(17, 4096, 4096), "sm_90")
    assert "M ≤ 8" in gemv_supports(GemmSpec(16, 4096, 4096, "nn", "bf16"), "sm_90")  # 16 x 8 sums per thread
    assert family_for(GemmSpec(1, 4096, 4096, "nt", "bf16"), "sm_90a").name == "gemv"
    assert family_for(GemmSpec(3, 4096, 4096, "nt", "bf16"), "sm_90a").name == "gemv"
    assert family_for(GemmSpec(16, 4096, 4096, "nt", "bf16"), "sm_80").name == "gemv"
    assert family_for(GemmSpec(32, 4096, 4096, "nt", "bf16"), "sm_90a").name == "wgmma"


def test_swap_ab_takes_a_few_rows_on_hopper():
    """4-128 rows of A in 16-bit nt on sm_90a: gemv yields to the wgmma family, whose pick is the swap-AB rule's
    config (a tile as wide as M, fitted to 8); outside that (1-3 rows, 129, layout nn, fp32, unaligned K) it does not."""
    from gemmtune.chooser.candidates import SWAP_AB_STAGES

    for m, dtype, epilogue in ((4, "bf16", None), (16, "fp16", "bias_col+gelu"), (33, "bf16", "add"), (128, "bf16", None)):
        spec = GemmSpec(m, 4096, 4096, "nt", dtype, epilogue)
        assert family_for(spec, "sm_90a").name == "wgmma", spec.short()
        pick = choose(spec, "sm_90a")
        assert pick.config.swap_ab and pick.config.bn == 8 * -(-m // 8) and pick.config.split_tail, spec.short()
        assert pick.config.stages <= SWAP_AB_STAGES and "swap-AB rule" in pick.why()
    for spec in (GemmSpec(3, 4096, 4096, "nt", "bf16"), GemmSpec(129, 4096, 4096, "nt", "bf16"),
                 GemmSpec(40, 4096, 4096, "nn", "bf16"), GemmSpec(40, 4096, 4096, "nt", "fp32"),
                 GemmSpec(40, 4096, 4100, "nt", "bf16")):
        assert not getattr(choose(spec, "sm_90a").config, "swap_ab", False), spec.short()


def test_gemv_stream_follows_the_layout():
    kinds = {layout: (stream_kind(GemmSpec(1, 64, 64, layout)), stream_kind(GemmSpec(64, 1, 64, layout)))
             for layout in ("nn", "nt", "tn", "tt")}
    assert kinds == {"nn": ("columns", "rows"), "nt": ("rows", "rows"), "tn": ("columns", "columns"),
                     "tt": ("rows", "columns")}


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16", "tf32"])
def test_gemv_compiles_every_layout_and_epilogue(dtype):
    family = get_family("gemv")
    for layout in ("nn", "nt", "tn", "tt"):
        for shape in ((1, 13, 7), (77, 1, 4096), (5, 100, 4104)):
            for epilogue in ("none", "bias_row+gelu+add", "alpha+beta+bias_col+relu"):
                spec = GemmSpec(*shape, layout=layout, dtype=dtype, epilogue=epilogue)
                for config in (GemvConfig(), GemvConfig(threads=512, warps_per_output=4, threads_x=2, unroll=2),
                               GemvConfig(threads=256, warps_per_output=2, outputs_per_warp=4, unroll=4)):
                    compiled = compile_kernel(family.render(spec, config, "sm_90"), "sm_90")
                    assert compiled.resources.spills == 0


# Picks moved on purpose since that table, with why (each still differs from the table's).
MOVED_SINCE_THE_TABLE = {
    ("1x1024x4096 nn fp32", "fp32"): "the cluster K split is no longer picked (synccheck, 2026-11-29)",
    **{(f"{shape} nt {dtype}", dtype): "no overlapped write-back on 2-consumer tiles under 256 wide (2026-11-29)"
       for shape in ("512x4096x4096", "2048x5120x1280") for dtype in ("bf16", "fp16")},
    **{(f"{shape} nt {dtype}", dtype): "no overlapped write-back on one consumer's 64-row tiles (2026-11-29)"
       for shape in ("4096x128x4096", "1000x1000x1000") for dtype in ("bf16", "fp16")},
    **{(f"{shape} nt {dtype}", dtype): "swap-AB at 4-128 rows (2026-11-29; git show 78435b0:bench/results/2026-11-29-h200-swap-ab.md)"
       for shape in ("128x4096x14336", "64x8192x8192", "64x14336x4096", "32x4096x11008", "16x4096x4096",
                     "128x14336x4096", "16x14336x4096", "8x4096x4096", "96x96x65536") for dtype in ("bf16", "fp16")},
    **{(f"200x300x504 nt {dtype}", dtype): "the small-tile ring: a 64x64 pick takes 10 stages (2026-11-29; "
       "bench/results/2026-11-29-h200-small-tiles.md)" for dtype in ("bf16", "fp16")},
}


def test_shipped_chooser_still_picks_what_the_results_table_measured():
    """bench/results/2026-11-27-h100-eval-untuned.* measured the shipped chooser's picks on the eval
    set in four dtypes; a change to the candidates or the model that moves a pick makes that table
    stale (re-run bench/bench_untuned.py --set eval --dtypes bf16,fp16,tf32,fp32)."""
    import gzip
    from pathlib import Path

    from gemmtune.kernels import family_for

    table = Path(__file__).resolve().parent.parent / "bench" / "results" / "2026-11-27-h100-eval-untuned.json.gz"
    rows = json.loads(gzip.decompress(table.read_bytes()))
    assert len(rows) == 176
    for row in rows:
        m, n, k = (int(x) for x in row["spec"].split()[0].split("x"))
        spec = GemmSpec(m, n, k, row["spec"].split()[1], row["dtype"])
        if row["source"] != "chooser":  # the shipped table's rows (known-configs) are not the chooser's
            continue
        if (row["spec"], row["dtype"]) in MOVED_SINCE_THE_TABLE:
            assert choose(spec, "sm_90a").config.describe() != row["config"], row["spec"]  # still moved
            continue
        assert family_for(spec, "sm_90a").name == row["family"], row["spec"]
        assert choose(spec, "sm_90a").config.describe() == row["config"], row["spec"]


# --- split tail in the explanation ------------------------------------------------------------------
def _schedule(spec, config):
    from gemmtune.kernels.wgmma.schedule import schedule_for

    return schedule_for(spec, config)


def test_explain_tells_the_split_tail_the_kernel_runs():
    """1024x1024x16384: too few tiles for the GPU, so the split-tail pick cuts them along K; the why
    line and the table say so, and the model's schedule features see the pieces."""
    spec = GemmSpec(1024, 1024, 16384, "nt", "bf16")
    picks = rank(spec, "sm_90a")
    pick = picks[0]
    s = _schedule(spec, pick.config)
    assert pick.family == "wgmma" and pick.config.split_tail and s.splits > 1
    c = pick.config.cluster_m
    tiles, pieces, blocks = s.units * c, s.split_units * s.splits * c, s.workers * c
    which = f"all {tiles} tiles" if s.whole_units == 0 else f"the last {s.split_units * c} tiles"
    why = pick.why()
    assert f"split tail: {which} split along K into {s.splits} ranges, {pieces} pieces on {blocks} blocks" in why
    assert pick.feature("splits") == 1.0  # split-K (simt's workspace splits); the split tail is tail_ways
    assert pick.feature("tail_ways") == s.splits and pick.feature("tile_times") == s.tile_times
    text = explain(picks)
    assert f"split along K into {s.splits}" in text
    first_row = next(line for line in text.splitlines() if line.startswith("  1 | "))
    cells = [cell.strip() for cell in first_row.split("|")]
    assert cells[2 + list(EXPLAINED).index("splits")] == str(s.splits)


def test_explain_counts_the_whole_waves_before_a_partial_split_tail():
    spec = GemmSpec(2560, 4096, 8192, "nt", "bf16")  # 320 tiles of 128x256: 2 rounds of 128 and 64 tiles
    tail = split_tail(spec, WgmmaConfig(bm=128, bn=256, split_tail=True), 132)
    assert (tail.tiles, tail.whole_tiles, tail.splits, tail.pieces, tail.blocks) == (320, 256, 2, 128, 128)
    assert tail.text().startswith("split tail: the last 64 tiles split along K into 2 ranges, 128 pieces on 128 "
                                  "blocks (1.94 waves of whole tiles, then 0.97 waves of 1/2-tile pieces)")
    pair = split_tail(spec, WgmmaConfig(bm=128, bn=256, split_tail=True, cluster_m=2), 132)  # 64 clusters of 2
    assert (pair.tiles, pair.whole_tiles, pair.pieces, pair.blocks) == (320, 256, 128, 128)


def test_explain_tells_even_shares_of_a_tail_over_half_the_gpu():
    spec = GemmSpec(8192, 8192, 8192, "nt", "bf16")  # 1024 units of 2 tiles on 66 pairs: 15 rounds and 34 units
    tail = split_tail(spec, WgmmaConfig(bm=128, bn=256, split_tail=True, cluster_m=2), 132)
    assert (tail.tiles, tail.whole_tiles, tail.splits, tail.pieces, tail.blocks) == (2048, 1980, 0, 132, 132)
    assert tail.ways == pytest.approx(132 / 68)
    assert tail.text().startswith("split tail: the last 68 tiles shared along K in even runs of 65.9 of their 128 "
                                  "k-blocks, 132 shares on 132 blocks (15.00 waves of whole tiles, then 1.00 waves "
                                  "of shares)")
    assert split_tail(GemmSpec(4096, 4096, 4096, "nt", "bf16"), WgmmaConfig(split_tail=True), 132) is None


def test_explain_mentions_no_split_where_the_schedule_has_none():
    spec = GemmSpec(4096, 4096, 1024, "nt", "bf16")  # 16 k-blocks: too few to split
    picks = rank(spec, "sm_90a")
    assert picks[0].family == "wgmma" and _schedule(spec, picks[0].config).splits == 1
    assert picks[0].split is None
    text = explain(picks)
    assert "split tail" not in text and "split along K" not in text
    for p in picks:  # the table's splits column is the model's feature wherever nothing is split
        assert p.split is None and p.shown() == dict(p.features)
    assert split_tail(spec, WgmmaConfig(split_tail=False), 132) is None


def test_split_tail_leaves_other_families_alone():
    assert split_tail(GemmSpec(64, 4096, 4096), SimtConfig(split_k=4), 132) is None
    assert split_tail(GemmSpec(1, 4096, 16384, "nt", "bf16"), GemvConfig(), 132) is None
    for spec, arch in ((GemmSpec(32, 4096, 8192, math="simt"), "sm_90"), (GemmSpec(16, 4096, 8192), "sm_90")):
        picks = rank(spec, arch)
        assert all(p.split is None for p in picks) and "split tail" not in explain(picks)


# --- the schedule features -----------------------------------------------------------------------
def test_schedule_features_follow_the_kernels_schedule():
    """tile_times and tail_ways (features.schedule_features, as `features` gives them) are the schedule
    the kernel runs (schedule_for): a lone partial wave split 4 ways takes a quarter of a tile-time;
    one block per tile takes its waves."""
    from gemmtune.chooser.features import schedule_features

    few_tiles = GemmSpec(1024, 1024, 16384, "nt", "tf32")  # 32 tiles of 128x256 on 132 SMs: split 4 ways
    split = WgmmaConfig(bm=128, bn=256, persistent=True, group_m=8, split_tail=True)
    f = features(few_tiles, split, 132)
    assert (f["tail_ways"], f["tile_times"], f["scatter"]) == (4.0, 0.25, 0.0)
    assert f["log2_k_blocks"] == 9.0 and f["log2_critical_k_blocks"] == 7.0  # 512 k-blocks of 32; a quarter each
    whole = features(few_tiles, split.with_(split_tail=False), 132)
    assert (whole["tail_ways"], whole["tile_times"]) == (1.0, 1.0)
    one_per_tile = features(GemmSpec(4096, 4096, 1024, "nt", "bf16"), WgmmaConfig(bm=128, bn=256), 132)
    assert one_per_tile["tile_times"] == 4.0  # 512 tiles, one block per SM at a time: 3.9 waves
    many = features(GemmSpec(96, 96, 65536, "nt", "bf16"),
                    WgmmaConfig(bm=64, bn=64, consumers=1, persistent=True, group_m=8, split_tail=True), 132)
    assert many["scatter"] == 1.0 and many["tail_ways"] >= 6
    assert schedule_features(GemmSpec(64, 4096, 4096), SimtConfig(split_k=4), 132, 1.0, 132) == {}


def test_schedule_fill_sees_the_last_rounds_idle_blocks():
    """schedule_fill: 1536x6144x1536 in 128x256 tiles is 288 tiles on 128 blocks, 3 rounds with the
    last a quarter full (0.75); in 128x192 tiles 384, 3 full rounds (1.0). The critical path at one
    SM's share of the peak is then a third longer for 128x256."""
    spec = GemmSpec(1536, 6144, 1536, "nt", "bf16")
    wide = WgmmaConfig(bm=128, bn=256, persistent=True, group_m=8, split_tail=True)
    f256, f192 = features(spec, wide, 132), features(spec, wide.with_(bn=192), 132)
    assert f256["tile_times"] == f192["tile_times"] == 3.0
    assert f256["schedule_fill"] == pytest.approx(0.75) and f192["schedule_fill"] == pytest.approx(1.0)
    assert f256["log_critical_over_roofline"] - f192["log_critical_over_roofline"] == pytest.approx(math.log(256 / 192))
    # One block per tile: 64x64 tiles of 96x96x65536 fill 96*96 of 128*128 (the edge tiles' waste).
    plain = features(GemmSpec(96, 96, 65536, "nt", "bf16"), WgmmaConfig(bm=64, bn=64, consumers=1), 132)
    assert plain["schedule_fill"] == pytest.approx(96 * 96 / (128 * 128))


def test_a_few_long_tf32_tiles_get_a_split_tail_pick():
    pick = choose(GemmSpec(1024, 1024, 16384, "nt", "tf32"), "sm_90a")
    assert pick.config.split_tail and split_tail(GemmSpec(1024, 1024, 16384, "nt", "tf32"), pick.config, 132)


# --- tile widths fitted to N --------------------------------------------------------------------------

def test_a_pick_whose_width_pads_n_takes_its_fitted_twin():
    """5000x300 in 128x128 tiles computes 384 columns for 300; the twin covers them in three 104-wide
    tiles (312), at its parent's prediction, and says so."""
    from gemmtune.chooser.candidates import fitted_twin

    spec = GemmSpec(5000, 300, 2048, "nt", "tf32")
    pick = choose(spec, "sm_90a")
    assert (pick.config.bm, pick.config.bn, pick.fitted_from) == (128, 104, 128)
    assert not pick.config.tma_store and pick.config.cluster_m == 1
    assert not get_family("wgmma").rejections(pick.config, spec, "sm_90a")
    assert "fitted to N: 104 columns for 128" in pick.why()
    parent = pick.config.with_(bn=128)
    assert fitted_twin(spec, parent) == pick.config
    assert dict(pick.features)["tile_waste"] < 0.07 < 0.2 < features(spec, parent, 132)["tile_waste"]
    configs = [p.config for p in rank(spec, "sm_90a")]
    assert len(configs) == len(set(configs))


@pytest.mark.parametrize("spec, bn, expected", [
    (GemmSpec(5000, 300, 2048, "nn", "bf16"), 128, None),  # B N-contiguous: boxes of 64 columns
    (GemmSpec(5000, 300, 2048, "nt", "fp32"), 128, None),  # 3xtf32: unmeasured
    (GemmSpec(4096, 4096, 4096, "nt", "bf16"), 128, None),  # N already a multiple of the width
    (GemmSpec(2048, 1000, 4096, "nt", "bf16"), 256, None),  # 1024 -> 1000: 2% is under the threshold
    (GemmSpec(2048, 600, 4096, "nt", "tf32"), 128, 120),  # 640 -> 600: 6.25%
    (GemmSpec(2048, 300, 4096, "tt", "bf16"), 256, 152),
])
def test_fitted_twin_only_where_b_is_k_major_and_the_saving_is_worth_it(spec, bn, expected):
    from gemmtune.chooser.candidates import fitted_twin

    config = WgmmaConfig(bm=128, bn=bn, consumers=2, stages=4, persistent=True, split_tail=True)
    twin = fitted_twin(spec, config)
    assert (twin.bn if twin else None) == expected


def test_a_parent_storing_through_tma_or_in_clusters_keeps_its_width():
    """Measured: twins of TMA-storing parents lost 3 times in 4 (they store directly)."""
    from gemmtune.chooser.candidates import fitted_twin

    spec = GemmSpec(16384, 200, 1024, "nt", "fp16")  # 256 -> 200 columns: 22% fewer
    direct = WgmmaConfig(bm=128, bn=256, consumers=2, stages=4, persistent=True, split_tail=True)
    assert fitted_twin(spec, direct).bn == 200
    assert fitted_twin(spec, direct.with_(tma_store=True, store_slices=2)) is None
    assert fitted_twin(spec, direct.with_(tma_store=True, cluster_m=2)) is None
    assert choose(spec, "sm_90a").fitted_from == 0  # the model's pick there stores through TMA


def test_one_vector_rows_take_the_block_shape_measured_back_to_back():
    """One vector against a K-contiguous W on sm_90+: 512 threads, 8 warps an output, unroll by value size
    (ONE_VECTOR_ROWS_CONFIG); several vectors and other archs keep their candidates."""
    from gemmtune.chooser.candidates import ONE_VECTOR_ROWS_CONFIG

    for spec, size in ((GemmSpec(1, 1024, 4096, "nt", "bf16"), 2), (GemmSpec(4096, 1, 4096, "nn", "fp32"), 4),
                       (GemmSpec(1, 32000, 4096, "nt", "tf32"), 4)):
        pick = choose(spec, "sm_90a")
        assert pick.config == ONE_VECTOR_ROWS_CONFIG[size], (spec.short(), pick.config.describe())
        assert pick.config.warps_per_output == 8 and pick.config.threads == 512
    assert choose(GemmSpec(1, 1024, 4096, "nt", "bf16"), "sm_80").config != ONE_VECTOR_ROWS_CONFIG[2]
    assert choose(GemmSpec(1, 1024, 4096, "nn", "fp32"), "sm_90a").config.warps_per_output == 1  # columns kind


def test_explain_says_when_the_overlap_is_dropped():
    """512x512x65536: every tile split along K, so the pick's overlap_epilogue is not rendered; why() says so,
    and a shape with whole tiles does not."""
    long_k = rank(GemmSpec(512, 512, 65536, "nt", "fp16"), "sm_90a")[0]
    assert long_k.config.overlap_epilogue and long_k.split is not None and long_k.split.whole_tiles == 0
    assert "runs without overlap_epilogue" in long_k.why()
    square = rank(GemmSpec(4096, 4096, 4096, "nt", "bf16"), "sm_90a")[0]
    assert "runs without overlap_epilogue" not in square.why()


def test_epilogues_that_read_c_without_a_bias_keep_the_plain_picks_tile():
    """on_plain_tile: `add`/`alpha+beta` specs run on the plain GEMM's pick's tile and schedule (measured faster
    on every such shape, 2026-11-28); with a bias, or without C, the model's order stands."""
    from gemmtune.chooser import fitted, rank, rank_configs, tile_key
    from gemmtune.chooser.candidates import candidates

    for m, n, k, epilogue in ((200, 5120, 13824, "add"), (256, 8192, 8192, "alpha+beta"), (1024, 2048, 8192, "relu+add")):
        spec = GemmSpec(m, n, k, "nt", "bf16", epilogue)
        plain = rank(spec.without_epilogue(), "sm_90a", 132)[0].config
        first = rank(spec, "sm_90a", 132)[0]
        assert tile_key(first.config) == tile_key(plain) and first.config.c_path(spec).value != "none"
        model_order = fitted(spec, rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132), 132)
        if tile_key(model_order[0].config) != tile_key(plain):  # moved: the explanation says so
            assert first.plain_tile and "on_plain_tile" in first.why()
    spec = GemmSpec(5000, 1024, 1024, "nt", "bf16", "bias_col+add")
    model_order = fitted(spec, rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132), 132)
    assert rank(spec, "sm_90a", 132)[0].config == model_order[0].config


def test_small_tile_picks_take_the_deeper_ring():
    """candidates.small_tile_ring: a 64x64 pick in a 16-bit type runs a 10-stage ring (the model's own pick had
    6), the rest of its config unchanged and its explanation naming the rule; wider tiles and fp32 keep theirs."""
    from gemmtune.chooser.candidates import SMALL_TILE_RING_STAGES, small_tile_ring

    for dtype in ("bf16", "fp16"):
        spec = GemmSpec(300, 768, 2048, "nt", dtype)
        first = rank(spec, "sm_90a", 132)[0]
        assert (first.config.bm, first.config.bn, first.config.stages) == (64, 64, SMALL_TILE_RING_STAGES)
        assert small_tile_ring(first.config.with_(stages=6), spec) == first.config and "small-tile ring rule" in first.scored_by
        assert small_tile_ring(first.config, spec) is None  # already as deep as the rule asks
        assert not get_family("wgmma").rejections(first.config, spec, "sm_90a")
    square = rank(GemmSpec(4096, 4096, 4096, "nt", "bf16"), "sm_90a", 132)[0]
    assert square.config.stages <= 6 and "small-tile ring" not in square.scored_by
    tf32 = rank(GemmSpec(300, 768, 2048, "nt", "fp32"), "sm_90a", 132)[0]
    assert "small-tile ring" not in tf32.scored_by


def test_two_rows_of_tiles_take_the_width_of_one_wave():
    """candidates.wave_width_config: at 193-256 rows, where the pick's
    128-row tiles leave SMs idle in their one wave, the pick takes the width that fits them in one wave, stored
    in 2 ragged slices; 160 rows, C-reading epilogues and already-whole waves keep the pick."""
    from gemmtune.chooser.candidates import wave_width_config

    for m, n in ((200, 14336), (256, 13824), (224, 10240)):
        first = rank(GemmSpec(m, n, 4096, "nt", "bf16"), "sm_90a", 132)[0]
        c = first.config
        assert "wave-width rule" in first.scored_by and c.bn % 32 == 0 and c.store_slices == 2
        assert 2 * -(-n // c.bn) <= 132 < 2 * -(-n // 256) * 2 and c.stages >= 4
        assert compile_kernel(get_family("wgmma").render(GemmSpec(m, n, 4096, "nt", "bf16"), c, "sm_90a"),
                              "sm_90a").resources.spill_store_bytes == 0
    for spec in (GemmSpec(160, 13824, 5120, "nt", "bf16"), GemmSpec(200, 14336, 4096, "nt", "bf16", epilogue="add"),
                 GemmSpec(256, 8192, 4096, "nt", "bf16")):
        assert "wave-width" not in rank(spec, "sm_90a", 132)[0].scored_by
        assert wave_width_config(spec, rank(spec, "sm_90a", 132)[0].config, 132) is None or spec.m == 160


# --- scattered tails last (chooser.scattered_tails_last) ---------------------------------------------
def test_a_long_k_pick_with_a_large_even_share_tail_goes_behind_the_others():
    from gemmtune.chooser import scattered_tail, scattered_tails_last

    spec = GemmSpec(3008, 2304, 12800, "nt", "bf16")  # 128x256: 24x9 tiles, the last 84 shared along K
    ranked = rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132)
    assert scattered_tail(spec, ranked[0])  # the model alone ranks such a config first
    assert ranked[0].split.splits == 0 and ranked[0].split.k_blocks == 200
    moved = scattered_tails_last(spec, ranked)
    assert sorted(map(repr, (p.config for p in moved))) == sorted(map(repr, (p.config for p in ranked)))  # none dropped
    kept = [p for p in moved if not scattered_tail(spec, p)]
    assert kept and moved[:len(kept)] == kept  # every scattered config after every other one
    first = rank(spec, "sm_90a", 132)[0]
    assert not scattered_tail(spec, first) and first.scattered_behind >= 1 and "scattered_tails_last" in first.why()


def test_scattered_tails_keep_their_place_for_3xtf32_short_tails_and_short_k():
    from gemmtune.chooser import SCATTERED_TAIL_MIN_K_BLOCKS, scattered_tail

    big = GemmSpec(8192, 8192, 8192, "nt", "bf16")  # 128x256: 2048 tiles, 68 in the shared tail (3%)
    pick = rank_configs(big, "wgmma", [WgmmaConfig(split_tail=True)], 132)[0]
    assert pick.split is not None and pick.split.splits == 0 and not scattered_tail(big, pick)
    for dtype, layout, k in (("fp32", "nn", 12800), ("bf16", "nt", 64 * (SCATTERED_TAIL_MIN_K_BLOCKS - 1))):
        spec = GemmSpec(3008, 2304, k, layout, dtype)
        for p in rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132):
            assert not scattered_tail(spec, p)



def test_an_epilogue_reading_c_keeps_the_model_order_over_scattered_tails():
    # measured: with a residual add the moved picks took C by the slower C-spread path and lost 3 of 3
    spec = GemmSpec(3008, 2304, 12800, "nt", "bf16", epilogue="add")
    assert rank(spec, "sm_90a", 132)[0].config == rank(spec, "sm_90a", 132, scattered_last=False)[0].config
    plain = rank(spec.without_epilogue(), "sm_90a", 132)[0]
    assert plain.scattered_behind and rank(spec, "sm_90a", 132)[0].config.bn != plain.config.bn


def test_a_version_1_model_file_reads_as_the_same_trees(tmp_path):
    from gemmtune.chooser import model as chooser_model

    shipped = load(MODEL_PATH)
    family = shipped.families["wgmma"]
    v1 = shipped.to_json()
    v1["version"] = 1
    v1["families"]["wgmma"]["trees"] = [  # version 1: five flat arrays a tree
        [t.feature.tolist(), t.threshold.tolist(), t.left.tolist(), t.right.tolist(), t.value.tolist()]
        for t in family.trees]
    old = chooser_model.ChooserModel.from_json(json.loads(json.dumps(v1)))
    spec = GemmSpec(3000, 2000, 5000, "nt", "bf16")
    x, _ = feature_matrix([(spec, c, 132) for c in candidates("wgmma", spec, "sm_90a", 132)], family.feature_names)
    np.testing.assert_array_equal(old.families["wgmma"].predict_log_ratio(x), family.predict_log_ratio(x))
    assert json.loads(json.dumps(shipped.to_json()))["version"] == 2
    assert all(len(t) == 2 for t in shipped.to_json()["families"]["wgmma"]["trees"])


# --- one partial wave (chooser.one_wave_first) -------------------------------------------------------
def test_a_pick_of_fewer_tiles_than_sms_gives_way_to_the_narrower_tile_that_fills_one_wave():
    from gemmtune.chooser import one_wave_first
    from gemmtune.chooser.features import output_tiles

    def tiles_of(pick):
        return output_tiles(spec, pick.config.bm, pick.config.bn)

    spec = GemmSpec(480, 4224, 2944, "nt", "bf16")  # 128x192: 4x22 = 88 tiles; 128x128: 4x33 = 132, one a SM
    ranked = rank_configs(spec, "wgmma", candidates("wgmma", spec, "sm_90a", 132), 132)
    first = rank(spec, "sm_90a", 132)[0]
    assert (first.config.bm, first.config.bn, tiles_of(first)) == (128, 128, 132)
    assert "one-wave rule (132 tiles on 132 SMs)" in first.scored_by
    moved = one_wave_first(spec, ranked, 132)
    assert sorted(map(repr, (p.config for p in moved))) == sorted(map(repr, (p.config for p in ranked)))  # none dropped
    assert tiles_of(ranked[0]) < tiles_of(moved[0]) <= 132
    for spec in (GemmSpec(4096, 4096, 4096, "nt", "bf16"),   # many waves: the model's order
                 GemmSpec(480, 4224, 2944, "nn", "fp32")):   # 16-bit types only (the round was bf16)
        ranked = rank_configs(spec, family_for(spec, "sm_90a").name,
                              candidates(family_for(spec, "sm_90a").name, spec, "sm_90a", 132), 132)
        assert one_wave_first(spec, ranked, 132) == ranked
