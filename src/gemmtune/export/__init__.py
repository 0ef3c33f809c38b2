"""Export: a tuned kernel as a folder a C++ project can use without gemmtune.

``<name>.cuh`` (kernel + host launcher), ``main.cu`` (self-checking harness with a reference kernel),
``CMakeLists.txt``, ``README.md``, ``kernel.json`` (what and why), ``kernel_source.json`` (for
:func:`gemmtune.load`), and the NVRTC ``<name>.cubin`` / ``<name>.ptx``.
"""
from __future__ import annotations

from .loader import ExportedGemm, load
from .writer import ExportResult, export_source, export_spec

__all__ = ["ExportResult", "ExportedGemm", "export_source", "export_spec", "load"]
