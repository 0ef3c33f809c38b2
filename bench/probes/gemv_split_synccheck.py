"""Probe: the gemv K split over a cluster (issue 66) under compute-sanitizer's synccheck, as shipped and with
one part removed at a time by editing the exported source (the dependent-launch attribute, its L2 prefetch,
griddepcontrol, the early cluster arrive), beside the unsplit kernel of the same block shape.

    PYTHONPATH=src python bench/probes/gemv_split_synccheck.py [RUNS]   (GPU, compute-sanitizer, nvcc)
"""
import re, shutil, subprocess, sys, tempfile
from pathlib import Path
from gemmtune.spec import GemmSpec
from gemmtune.epilogue import Epilogue
from gemmtune.export import export_spec
from gemmtune.export.toolchain import build_harness, find_nvcc
from gemmtune.build import choose_config

runs = int(sys.argv[1]) if len(sys.argv) > 1 else 8
spec = GemmSpec(1, 1023, 4099, "nn", "fp32", Epilogue.parse("bias_col+gelu"))
split = choose_config(spec, "sm_90a").config
base = Path(tempfile.mkdtemp())
folders = {}
res = export_spec(spec, base / "split", arch="sm_90a", config=split)
res1 = export_spec(spec, base / "nosplit", arch="sm_90a", config=split.__class__(**{**split.__dict__, "k_splits": 1}))
VARIANTS = {
    "split (as shipped)": ("split", []),
    "no split (same block)": ("nosplit", []),
    "split, no PDL attribute": ("split", [("programmaticStreamSerializationAllowed = 1", "programmaticStreamSerializationAllowed = 0")]),
    "split, no L2 prefetch": ("split", [(r"\n\s*prefetch_rows_to_l2\(W[^;]*;", "\n")]),
    "split, no griddepcontrol": ("split", [(r'asm volatile\("griddepcontrol\.launch_dependents;" ::: "memory"\);', ""),
                                           (r'asm volatile\("griddepcontrol\.wait;" ::: "memory"\);', "")]),
    "split, no early arrive": ("split", [(r"\n\s*cluster_arrive_relaxed\(\);[^\n]*", "\n"), (r"\bcluster_wait\(\);", "cluster_sync();")]),
}
for name, (src, edits) in VARIANTS.items():
    folder = base / re.sub(r"\W+", "_", name)
    shutil.copytree(base / src, folder)
    for f in folder.iterdir():
        if f.suffix in (".cuh", ".cu", ".h"):
            text = f.read_text()
            for pat, rep in edits:
                text = re.sub(pat, rep, text)
            f.write_text(text)
    exe = build_harness(folder, find_nvcc())
    bad = 0
    first = ""
    for i in range(runs):
        p = subprocess.run(["compute-sanitizer", "--tool", "synccheck", "--error-exitcode", "97", str(exe), "1"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            bad += 1
            first = first or " | ".join(l for l in p.stdout.splitlines()[1:4])
    print(f"VARIANT {name:28s}: {bad} of {runs} reported  {first[:200]}", flush=True)
