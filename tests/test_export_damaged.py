"""A damaged export folder is refused with one line naming the file (exit status 2), before any GPU
or driver sees it: a binary PTX, a cubin that is no ELF image, a kernel_source.json that is binary."""
from __future__ import annotations

from pathlib import Path

import pytest

from gemmtune.export import export_spec
from gemmtune.export.loader import compiled_from_folder
from gemmtune.input_files import InputFileError
from gemmtune.spec import GemmSpec


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return export_spec(GemmSpec(64, 48, 32), tmp_path_factory.mktemp("export") / "gemm", arch="sm_80").path


def _damaged(folder: Path, tmp_path: Path, suffix: str, content: bytes) -> Path:
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    target = next(p for p in copy.iterdir() if p.name.endswith(suffix))
    target.write_bytes(content)
    return copy


def test_an_intact_export_reads(folder):
    manifest, compiled = compiled_from_folder(folder)
    assert compiled.cubin.startswith(b"\x7fELF") and compiled.ptx


@pytest.mark.parametrize("suffix, content, message", [
    (".ptx", b"\xff\xfe\x00binary", "not PTX text"),
    (".cubin", b"not an elf image", "not a cubin"),
    ("kernel_source.json", b"\x00\x01\x02", "kernel source"),
    ("kernel_source.json", b"[1, 2]", "damaged"),
])
def test_a_damaged_part_is_one_line_and_exit_2(folder, tmp_path, suffix, content, message):
    with pytest.raises(InputFileError, match=message) as info:
        compiled_from_folder(_damaged(folder, tmp_path, suffix, content))
    assert info.value.exit_code == 2 and "\n" not in str(info.value)
