"""The family registry as every verb uses it: choosing, naming, refusing (no GPU needed)."""
from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from gemmtune.build import build, chosen_config, parse_config
from gemmtune.errors import ConfigError
from gemmtune.export import config_source
from gemmtune.kernels import families, family_for, family_of_config, get_family
from gemmtune.kernels.simt.config import SimtConfig, ladder
from gemmtune.spec import GemmSpec
from gemmtune.tune.space import space_for

FP32 = GemmSpec(256, 256, 256)
BF16 = GemmSpec(256, 256, 256, dtype="bf16")


@pytest.fixture
def no_tuning_db(monkeypatch):
    fake = types.ModuleType("gemmtune.tune.db")
    fake.best_known_trial = lambda spec, arch_or_device, db_path=None, family=None: None
    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", fake)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmtune.cli", *args], capture_output=True, text=True, timeout=300)


def test_simt_is_registered_and_describes_itself():
    simt = get_family("simt")
    assert simt in families() and simt.config_type is SimtConfig
    assert simt.ladder("sm_90") == ladder("sm_90")
    assert simt.render(FP32, simt.default_config(FP32, "sm_90"), "sm_90").family == "simt"
    assert space_for("simt").family == "simt" and space_for("simt").config_type is SimtConfig


def test_fp32_goes_to_simt_and_simt_refuses_other_dtypes():
    assert family_for(FP32, "sm_90").name == "simt"
    for dtype in ("tf32", "fp16", "bf16"):
        spec = GemmSpec(64, 64, 64, dtype=dtype)
        assert "simt computes fp32 only" in get_family("simt").supports(spec, "sm_90")
        with pytest.raises(ConfigError, match=f"family simt cannot run 64x64x64 nn {dtype}"):
            family_for(spec, "sm_90", "simt")


def test_unknown_family_and_foreign_configs_are_config_errors():
    with pytest.raises(ConfigError, match="unknown family 'nope'; known: .*simt"):
        get_family("nope")
    assert family_of_config(SimtConfig()).name == "simt"
    with pytest.raises(ConfigError, match="no registered family's config"):
        family_of_config({"bm": 64})
    with pytest.raises(ConfigError, match="is a simt config, not a other config"):
        chosen_config(FP32, SimtConfig(), "sm_90", "other")


def test_build_dispatches_by_family(no_tuning_db):
    kern = build(FP32, "naive", arch="sm_90", family="simt")
    assert kern.family == "simt" and kern.config == ladder("sm_90")[0][1]
    assert build(FP32, SimtConfig(), arch="sm_90").family == "simt"  # the config names its family
    with pytest.raises(ConfigError, match="simt computes fp32 only"):
        build(BF16, SimtConfig(), arch="sm_90")


def test_parse_config_uses_the_family_ladder_and_defaults():
    simt = get_family("simt")
    assert parse_config("warptiling", FP32, "sm_90", simt).source == "ladder step warptiling"
    chosen = parse_config('{"bm": 64}', FP32, "sm_90", simt)
    assert chosen.config.bm == 64 and chosen.family == "simt"
    with pytest.raises(ConfigError, match="simt ladder step"):
        parse_config("fastest", FP32, "sm_90", simt)


# --- known configs per family --------------------------------------------------------------------
def test_shipped_known_configs_name_their_family():
    data = json.loads(config_source.KNOWN_CONFIGS.read_text())
    assert "family" not in data and all(row["family"] in ("simt", "wgmma", "mma") for row in data["entries"])
    rows = config_source.load_known_configs()
    assert {row.family for row in rows} == {"simt", "wgmma", "mma"}
    for row in rows:  # every config parses as its own family's type
        assert type(row.config) is get_family(row.family).config_type


def test_known_configs_default_to_simt_and_are_matched_by_family(tmp_path, no_tuning_db):
    row = {"gpu": "H100", "arch": "sm_90", "m": 256, "n": 256, "k": 256, "config": SimtConfig(bm=64).to_json()}
    table = tmp_path / "known.json"
    table.write_text(json.dumps({"format": 2, "entries": [row]}))
    choice = config_source.choose_config(FP32, "sm_90", table=table)
    assert choice.family == "simt" and choice.config.bm == 64 and choice.provenance.source == "known-configs"
    assert config_source.from_known_configs(FP32, "sm_90", table=table, family="other") is None
    table.write_text(json.dumps({"entries": [{**row, "family": "nope"}]}))
    with pytest.raises(ConfigError, match="unknown family 'nope'"):
        config_source.load_known_configs(table)


def test_known_configs_prefer_the_same_dtype(tmp_path):
    rows = [{"family": "simt", "gpu": "H100", "arch": "sm_90", "m": 256, "n": 256, "k": 256, "dtype": dtype,
             "config": SimtConfig(bm=bm).to_json()} for dtype, bm in (("tf32", 32), ("fp32", 64))]
    table = tmp_path / "known.json"
    table.write_text(json.dumps({"entries": rows}))
    assert config_source.from_known_configs(FP32, "sm_90", table=table).config.bm == 64


def test_tuning_db_is_asked_for_the_chosen_family(monkeypatch):
    asked = {}

    def best_known_trial(spec, arch_or_device, db_path=None, family=None):
        asked["family"] = family

    monkeypatch.setitem(sys.modules, "gemmtune.tune.db", types.SimpleNamespace(best_known_trial=best_known_trial))
    assert config_source.choose_config(FP32, "sm_90").provenance.source in ("known-configs", "chooser")
    assert asked["family"] == "simt"


def test_best_known_trial_picks_the_family_from_the_registry(tmp_path):
    from gemmtune.tune.db import TuningDB, best_known_trial

    path = tmp_path / "db.sqlite"
    TuningDB(path).close()
    assert best_known_trial(FP32, "sm_90", path) is None  # family from family_for: simt
    with pytest.raises(ConfigError, match="no generator family supports|wgmma"):
        best_known_trial(GemmSpec(64, 64, 64, dtype="bf16"), "sm_75", path)  # sm_75 tensor cores: fp16 only


# --- the command line -------------------------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["show", "MNK=64", "--family", "nope"], "unknown family 'nope'"),
    (["show", "MNK=64", "--dtype", "bf16", "--family", "simt", "--arch", "sm_90"], "simt computes fp32 only"),
    (["show", "MNK=64", "--dtype", "fp8"], "unknown dtype 'fp8'"),
    (["show", "MNK=64", "--out-dtype", "fp16"], "out dtype fp16 is not allowed with fp32 inputs"),
    (["show", "MNK=64", "--dtype", "fp16", "--out-dtype", "bf16"], "choose fp16 or fp32"),
    (["space", "MNK=64", "--dtype", "bf16", "--family", "simt", "--arch", "sm_90"], "simt computes fp32 only"),
    (["space", "MNK=64", "--family", "nope"], "unknown family"),
    (["tune", "MNK=64", "--family", "nope", "--simulate", "x.csv"], "unknown family"),
    (["export", "MNK=64", "--out", "x", "--family", "nope", "--arch", "sm_90"], "unknown family"),
    (["bench", "MNK=64", "--family", "nope"], "unknown family"),
    (["db", "best", "MNK=64", "--family", "nope"], "unknown family"),
    (["profile", "MNK=64", "--dtype", "bf16", "--family", "simt"], "simt computes fp32 only"),
])
def test_family_and_dtype_errors_are_one_line_exit_2(args, fragment):
    out = run_cli(*args)
    assert out.returncode == 2, out.stderr
    assert fragment in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_show_names_the_family(capsys):
    from gemmtune.cli import main

    assert main(["show", "MNK=64", "--family", "simt", "--config", "naive", "--no-code", "--arch", "sm_90"]) == 0
    assert "// config   simt: naive 32x32" in capsys.readouterr().out


def test_an_mma_known_config_applies_only_to_rows_of_its_copy_width():
    """The 4096^3 entry (128-byte slices, 16-byte copies) must not reach a nearby shape whose rows are
    copied 2 bytes at a time, and the odd-row entry must not reach an aligned one."""
    aligned = config_source.from_known_configs(GemmSpec(4000, 4000, 4000, "nt", "bf16"), "sm_90", family="mma")
    odd = config_source.from_known_configs(GemmSpec(4095, 4095, 4095, "nt", "bf16"), "sm_90", family="mma")
    assert aligned is not None and aligned.config.k_bytes == 128 and "4096x4096x4096" in aligned.provenance.detail
    assert odd is not None and odd.config.k_bytes == 32 and "4093x4091x4097" in odd.provenance.detail
    # 8-byte rows (K = 1500 bf16) find the 3000x5000x1500 entry, never the 16-byte or 2-byte ones.
    eight = config_source.from_known_configs(GemmSpec(2900, 5000, 1500, "nn", "bf16"), "sm_90", family="mma")
    assert eight is not None and "3000x5000x1500" in eight.provenance.detail
