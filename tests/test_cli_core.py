"""The command line's core verbs without a GPU: show works, errors are one line with exit code 2/3."""
import re
import subprocess
import sys

import pytest

from gemmtune.cli import main
from gemmtune.device import gpu_available


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemmtune.cli", *args], capture_output=True, text=True, timeout=300)


def test_show_prints_cuda_and_resources():
    out = run_cli("show", "M=100", "N=70", "K=33", "--layout", "tn", "--arch", "sm_80")
    assert out.returncode == 0, out.stderr
    assert 'extern "C" __global__' in out.stdout and "constexpr int M = 100, N = 70, K = 33;" in out.stdout
    assert "// ptxas    sm_80:" in out.stdout and "0 B spill stores" in out.stdout


def test_show_names_the_cluster_and_the_early_start(capsys):
    # The K split over a cluster is no pick since 2026-11-29 (chooser.candidates.CLUSTER_SPLIT_UNTUNED): asked by name.
    split = '{"threads": 256, "threads_x": 8, "unroll": 4, "k_splits": 16}'
    assert main(["show", "M=1", "N=1024", "K=4096", "--layout", "nn", "--arch", "sm_90a", "--no-code",
                 "--family", "gemv", "--config", split]) == 0
    launch = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("// launch"))
    assert "grid (32, 16, 1)" in launch and "clusters of 16 blocks" in launch and "dependent launch" in launch
    assert main(["show", "M=1", "N=1024", "K=4096", "--layout", "nn", "--arch", "sm_80", "--no-code"]) == 0
    launch = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("// launch"))
    assert "clusters" not in launch and "dependent launch" not in launch


def test_show_with_ladder_step_and_json_config(capsys):
    assert main(["show", "MNK=64", "--config", "naive", "--no-code", "--arch", "sm_90"]) == 0
    assert "naive 32x32" in capsys.readouterr().out
    assert main(["show", "MNK=64", "--config", '{"bm": 64, "bn": 64, "wm": 32, "wn": 32, "wniter": 2, "tm": 4}',
                 "--no-code", "--arch", "sm_90"]) == 0
    assert "tile 64x64x16" in capsys.readouterr().out


@pytest.mark.parametrize("args, code, fragment", [
    (["show", "M=0", "N=4", "K=4"], 2, "at least 1"),
    (["show", "MNK=4", "--layout", "xx"], 2, "unknown layout"),
    (["show", "MNK=4", "--dtype", "int8"], 2, "unknown dtype"),
    (["show", "MNK=4", "--epilogue", "relu+relu"], 2, "repeats"),
    (["show", "MNK=4", "--config", "fastest"], 2, "--config must be"),
    (["show", "MNK=4", "--arch", "sm_12"], 1, "unknown arch"),
    (["show", "MNK=64", "--config", '{"bm": 48}'], 2, "config rejected"),
])
def test_bad_input_is_one_line(args, code, fragment):
    out = run_cli(*args)
    assert out.returncode == code
    assert fragment in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU message")
def test_bench_without_gpu_says_so():
    out = run_cli("bench", "MNK=256")
    assert out.returncode == 3 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_every_verb_has_help():
    out = run_cli("--help")
    assert out.returncode == 0
    verbs = [m.group(1) for m in re.finditer(r"^    (\w[\w-]*)\s", out.stdout, re.MULTILINE)]
    assert "show" in verbs and "bench" in verbs
    for verb in verbs:
        assert run_cli(verb, "--help").returncode == 0, verb


def test_unreadable_file_is_one_line():
    out = run_cli("db", "import", "/nonexistent/trials.jsonl")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip() == "gemmtune: no such file: /nonexistent/trials.jsonl"
