"""gemmtune.build(spec): the Python API, the same path the command line takes.

    spec = gemmtune.GemmSpec(4096, 4096, 4096, layout="nn")
    kern = gemmtune.build(spec)            # best known config, compiled with NVRTC (no GPU needed)
    D = kern(A, B)                         # torch or cupy CUDA arrays; out= optional
    kern.source, kern.config, kern.resources
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .compiler import CompiledKernel, ResourceUsage, compile_kernel, ptx_image
from .errors import ConfigError, GemmtuneError
from .invoke import (BoundLaunches, TorchOperands, bind, collect_operands, device_ordinal, empty_like_framework, framework_of,
                     launch_on, launch_stream)
from .kernels import Family, family_for, family_of_config
from .spec import GemmSpec, refuse_fp8


@dataclass(frozen=True)
class ChosenConfig:
    config: Any  # the family's Config type
    source: str  # where it came from: "given", "tuning database", "ladder step X", "default"
    family: str = "simt"


def target_arch(arch: str | None) -> str:
    """The architecture to compile for: the given one, else the present GPU's, else sm_90."""
    if arch:
        return arch
    from .device import present_device

    device = present_device()
    return device.arch if device is not None else "sm_90"


def parse_config(text: str, spec: GemmSpec, arch: str, family: Family) -> ChosenConfig:
    """`--config` accepts a ladder step name of `family` or a JSON object of its config fields
    (laid over the family's default config for `spec`)."""
    steps = dict(family.ladder(arch))
    if text in steps:
        return ChosenConfig(steps[text], f"ladder step {text}", family.name)
    import json

    try:
        data = json.loads(text)
        base = family.default_config(spec, arch).to_json()
        return ChosenConfig(family.config_from_json({**base, **data}), "given", family.name)
    except (json.JSONDecodeError, ValueError, TypeError) as exc:
        raise ConfigError(f"--config must be a {family.name} ladder step ({', '.join(steps)}) "
                          f"or a JSON object: {exc}") from None


def choose_config(spec: GemmSpec, arch: str, db_path: Path | None = None, family: str | None = None) -> ChosenConfig:
    """Best known config for this spec on this device: tuning database, shipped table, else default.

    The same choice `gemmtune export` makes (export.config_source), so show/bench/build/export agree.
    """
    from .device import present_device
    from .export.config_source import choose_config as choose

    choice = choose(spec, arch, present_device(), db_path, family=family)
    return ChosenConfig(choice.config, choice.provenance.describe(), choice.family)


def chosen_config(spec: GemmSpec, config: Any, arch: str, family: str | None,
                  db_path: Path | None = None) -> tuple[Family, ChosenConfig]:
    """The family and config `build` uses: `config` may be None (best known), a ladder step name or
    JSON (of `family`, else of the family chosen for the spec), or a family's Config value."""
    if config is not None and not isinstance(config, str):
        found = family_of_config(config)
        if family and family != found.name:
            raise ConfigError(f"a {type(config).__name__} is a {found.name} config, not a {family} config")
        return family_for(spec, arch, found.name), ChosenConfig(config, "given", found.name)
    chosen_family = family_for(spec, arch, family)
    if config is None:
        return chosen_family, choose_config(spec, arch, db_path, chosen_family.name)
    return chosen_family, parse_config(config, spec, arch, chosen_family)


class Kernel:
    """A compiled kernel for one spec; loads onto a GPU on its first call there. A call with operands
    at pointers seen before reuses their bound launch (packed arguments, tensor maps)."""

    def __init__(self, compiled: CompiledKernel, config: Any, config_source: str):
        self.compiled = compiled
        self.config = config
        self.config_source = config_source
        self._loaded: dict[int, Any] = {}  # GPU ordinal -> LoadedKernel
        self._bound = BoundLaunches()  # by (ordinal, stream, bindings)
        self._torch: Any = None  # invoke.TorchOperands, made on the first call with a torch tensor

    @property
    def spec(self) -> GemmSpec:
        return self.compiled.source.spec

    @property
    def family(self) -> str:
        return self.compiled.source.family

    @property
    def source(self) -> str:
        return self.compiled.source.code

    @property
    def resources(self) -> ResourceUsage:
        return self.compiled.resources

    @property
    def arch(self) -> str:
        return self.compiled.arch

    def loaded(self, ordinal: int = 0):
        """The kernel loaded on GPU `ordinal` (loaded once, on first use)."""
        if ordinal not in self._loaded:
            from .runtime import LoadedKernel

            self._loaded[ordinal] = LoadedKernel(self.compiled, ordinal)
        return self._loaded[ordinal]

    def __call__(self, A: Any, B: Any, *operands: Any, out: Any = None, stream: Any = None, **named: Any) -> Any:
        """Enqueue D = epilogue(A·B) on A's GPU and return D (`out`, or a new array like A).

        It runs on `stream` when given (torch/cupy stream or handle), else on the current stream of
        A's framework, so CUDA-graph capture and side streams see it."""
        refuse_fp8(self.spec, "calling a built kernel on arrays")  # it would need scales and its row count
        values = collect_operands(self.spec, operands, named)
        if out is None:
            out = empty_like_framework(A, (self.spec.m, self.spec.n), self.spec.out_dtype)
        ordinal = device_ordinal(A)
        bindings = self._torch_bindings(A, B, values, out) or bind(self.compiled.source, A, B, values, out)
        handle = launch_stream(A, stream)
        bound = self._bound.get((ordinal, handle, tuple(bindings.items())),
                                lambda: self.loaded(ordinal).bind(bindings, handle))
        launch_on(bound, ordinal)
        return out

    def _torch_bindings(self, A: Any, B: Any, values: dict[str, Any], out: Any) -> dict[str, int | float] | None:
        """bind()'s result by TorchOperands' quick checks where every operand is a plain torch CUDA tensor
        that fits; None otherwise (bind() then checks, and says what does not fit)."""
        if framework_of(A) != "torch":
            return None
        if self._torch is None:
            self._torch = TorchOperands.of(self.compiled.source)
        return self._torch.bindings({"A": A, "B": B, "D": out, **values})

    def __repr__(self) -> str:
        return (f"Kernel({self.spec.short()}, {self.family} {self.config.describe()}, {self.arch}, "
                f"from {self.config_source})")


def build(spec: GemmSpec, config: Any = None, arch: str | None = None, family: str | None = None,
          db_path: Path | None = None, ptx: bool = False) -> Kernel:
    """Generate and compile the kernel for `spec`. `family` defaults to the registry's choice for the
    spec and arch; `config` is that family's Config, a ladder step name or JSON, or None (best known).
    `ptx`: the kernel loads as its PTX (arch `compute_XX`, compiler.ptx_image), which the driver of any
    GPU of that compute capability or newer JIT-compiles: an sm_75 build then runs on an H100 too."""
    if not isinstance(spec, GemmSpec):
        raise GemmtuneError("build() takes a gemmtune.GemmSpec")
    arch = target_arch(arch)
    chosen_family, chosen = chosen_config(spec, config, arch, family, db_path)
    compiled = compile_kernel(chosen_family.render(spec, chosen.config, arch), arch)
    return Kernel(ptx_image(compiled) if ptx else compiled, chosen.config, chosen.source)


# --- many configs at once ---------------------------------------------------------------------------
def _render_and_compile(job: tuple[GemmSpec, Any, str]) -> CompiledKernel | GemmtuneError:
    spec, config, arch = job
    try:
        return compile_kernel(family_of_config(config).render(spec, config, arch), arch)
    except GemmtuneError as err:  # returned, not raised: one bad config must not sink the batch
        return err


def compile_configs(jobs: list[tuple[GemmSpec, Any, str]],
                    workers: int | None = None) -> list[CompiledKernel | GemmtuneError]:
    """Render (by the config's family) and compile (spec, config, arch) jobs in spawned worker processes (NVRTC is the slow
    part of sweeps and test setup); one result per job, the typed error where it failed. The disk
    cache keeps every result, so a later compile_kernel of the same source is a file read."""
    from .lifeline import spawn_pool

    with spawn_pool(workers) as pool:
        return list(pool.map(_render_and_compile, jobs))
