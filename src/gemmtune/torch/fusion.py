"""Fusion that lives in forward code: residual adds and SwiGLU, found with torch.fx and rewritten in place.

optimize()'s hooks see modules (nn.Linear, a following nn.ReLU / nn.GELU); two fusions worth the most in a
decoder layer live in forward code instead:

- `add(linear(x), r)` / `add(r, linear(x))` (operator.add, torch.add without alpha, Tensor.add): the GEMM with
  the `add` epilogue (D = x·Wᵀ (+bias) + r), where r has the linear's output shape and dtype;
- `mul(silu(gate(x)), up(x))` (either operand order; F.silu, Tensor.silu or an nn.SiLU module; gate and up
  nn.Linear without bias on the same input, of the same sizes, bf16/fp16, N a multiple of 8): one gated GEMM
  over the gate and up weights interleaved (gemmtune.torch.gated).

Finding (`scan`): `torch.fx.symbolic_trace` of the model, else of each child, recursively (a module that does
not trace is skipped: `Scan.untraced`). One forward of the model records each traced module's inputs and
output; the traced graph is run on them (an fx Interpreter) for every node's shape and dtype, and a module whose
traced graph does not give the module's output, or that ran other than once, is skipped. A pattern is taken
only where every intermediate has exactly one user.

Rewriting (`set_routed`): the traced module keeps its children and parameters (state_dict keys unchanged); its
`forward` becomes an instance attribute, the code of its traced graph with each routed pattern's nodes replaced
by one call (`linear_add`, `swiglu`) that reads the Linear's weight (and bias) from the module as it runs, and
the interleaved gate/up weight from a non-persistent buffer on the Linears' parent, built when the pattern is
routed and dropped when it is not. Deleting the attribute puts the class's forward back. Linears the rewrite
does not touch are still called as modules, so optimize()'s other routing (module swaps) still applies.
"""
from __future__ import annotations

import inspect
import operator
import types
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch
import torch.fx as fx
from torch import nn

__all__ = ["Pattern", "Scan", "scan", "set_routed", "linear_add", "swiglu", "routed_patterns", "gated_available"]

_ADDS = {operator.add, torch.add, torch.Tensor.add}
_MULS = {operator.mul, torch.mul, torch.Tensor.mul}
_SILUS = {nn.functional.silu, torch._C._nn.silu} | ({torch.silu} if hasattr(torch, "silu") else set())
GATE_ROWS = 8  # the gated GEMM's interleave (gemmtune.spec.GATE_ROWS)


# --- the fused calls the rewritten forward makes ----------------------------------------------------------
def _kernel_linear_add(x2: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                       r2: torch.Tensor) -> torch.Tensor:
    """x2 (M, K) · weightᵀ (+ bias) + r2 (M, N), one gemmtune kernel (epilogue add or bias_col+add)."""
    from .operators import mm

    return mm(x2, weight.t(), "bias_col+add" if bias is not None else "add", c=r2, bias=bias)


_GATED: dict[str, Callable] = {}  # "gated_linear", "interleave_gate_up": gemmtune.torch.gated's, once loaded


def gated_available() -> Optional[str]:
    """None where gemmtune.torch.gated (the gated GEMM) loads, else why not (one line)."""
    if not _GATED:
        try:
            from . import gated
        except ImportError as err:
            return f"no gated GEMM in this gemmtune ({err})"
        _GATED.update(gated_linear=gated.gated_linear, interleave_gate_up=gated.interleave_gate_up)
    return None


def _kernel_gated(x2: torch.Tensor, w_gu: torch.Tensor) -> torch.Tensor:
    """silu(x2·Wgᵀ) ⊙ (x2·Wuᵀ) from the interleaved weight, one gemmtune kernel."""
    return _GATED["gated_linear"](x2, w_gu)


def linear_add(x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], residual: torch.Tensor,
               torch_under_compile: bool = False) -> torch.Tensor:
    """F.linear(x, weight, bias) + residual as one GEMM with the add epilogue; torch's two ops while
    torch.compile traces where `torch_under_compile` (gemmtune's kernel lost inside CUDA graphs)."""
    if torch_under_compile and torch.compiler.is_compiling():
        return nn.functional.linear(x, weight, bias) + residual
    n, k = weight.shape
    y = _kernel_linear_add(x.reshape(-1, k), weight, bias, residual.reshape(-1, n))
    return y.reshape(*x.shape[:-1], n)


def swiglu(x: torch.Tensor, w_gu: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
           torch_under_compile: bool = False) -> torch.Tensor:
    """F.silu(F.linear(x, w_gate)) * F.linear(x, w_up) as one gated GEMM over `w_gu` (interleaved gate/up);
    torch's ops while torch.compile traces where `torch_under_compile`."""
    if torch_under_compile and torch.compiler.is_compiling():
        return nn.functional.silu(nn.functional.linear(x, w_gate)) * nn.functional.linear(x, w_up)
    n, k = w_gate.shape
    return _kernel_gated(x.reshape(-1, k), w_gu).reshape(*x.shape[:-1], n)


# --- patterns ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Pattern:
    """One fusable pattern of a traced module `owner` ("" = the model): kind "add" or "swiglu", the Linear(s)
    as targets inside the owner ((linear,) or (gate, up)), and the graph's nodes it replaces by name."""

    owner: str
    kind: str
    linears: tuple[str, ...]
    nodes: tuple[str, ...]  # add: (linear, add, residual); swiglu: (gate, up, silu, mul)
    rows: int  # M: the product's rows (x's leading dimensions)

    @property
    def key(self) -> tuple:
        return (self.owner, self.kind, self.linears)

    def full(self, target: str) -> str:
        return f"{self.owner}.{target}" if self.owner else target


def _users(node: fx.Node) -> list[fx.Node]:
    return list(node.users)


def _is_add(node: fx.Node) -> bool:
    if node.op == "call_function" and node.target in _ADDS or node.op == "call_method" and node.target == "add":
        return len(node.args) == 2 and not node.kwargs  # alpha or out: not a plain add
    return False


def _is_mul(node: fx.Node) -> bool:
    if node.op == "call_function" and node.target in _MULS or node.op == "call_method" and node.target == "mul":
        return len(node.args) == 2 and not node.kwargs
    return False


def _is_silu(node: fx.Node, module: nn.Module) -> bool:
    if node.op == "call_function" and node.target in _SILUS:
        return len(node.args) == 1 and set(node.kwargs) <= {"inplace"}
    if node.op == "call_module":
        return isinstance(module.get_submodule(node.target), nn.SiLU)
    return node.op == "call_method" and node.target == "silu" and len(node.args) == 1 and not node.kwargs


def _linear_of(node: Any, module: nn.Module) -> Optional[nn.Linear]:
    if isinstance(node, fx.Node) and node.op == "call_module" and len(node.args) == 1 and not node.kwargs:
        sub = module.get_submodule(node.target)
        return sub if type(sub) is nn.Linear else None
    return None


def _add_patterns(owner: str, module: nn.Module, graph: fx.Graph, meta: dict) -> list[Pattern]:
    out = []
    for node in graph.nodes:
        if not _is_add(node):
            continue
        for lin, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            linear = _linear_of(lin, module)
            if linear is None or _users(lin) != [node] or not isinstance(other, fx.Node) or other is lin:
                continue
            if lin.name not in meta or other.name not in meta or node.name not in meta:
                continue
            if meta[lin.name] != meta[other.name] or meta[node.name] != meta[lin.name]:
                continue  # broadcasting or type promotion: not the kernel's C
            shape = meta[lin.name][0]
            out.append(Pattern(owner, "add", (lin.target,), (lin.name, node.name, other.name), _rows(shape)))
            break
    return out


def _swiglu_patterns(owner: str, module: nn.Module, graph: fx.Graph, meta: dict) -> list[Pattern]:
    out = []
    for node in graph.nodes:
        if not _is_mul(node):
            continue
        for act, up in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            if not (isinstance(act, fx.Node) and _is_silu(act, module)) or _users(act) != [node]:
                continue
            gate = act.args[0] if act.op != "call_module" else (act.args[0] if len(act.args) == 1 else None)
            g_lin, u_lin = _linear_of(gate, module), _linear_of(up, module)
            if g_lin is None or u_lin is None or gate is up or _users(gate) != [act] or _users(up) != [node]:
                continue
            if gate.args[0] is not up.args[0] or g_lin.bias is not None or u_lin.bias is not None:
                continue
            if (g_lin.in_features, g_lin.out_features) != (u_lin.in_features, u_lin.out_features):
                continue
            if any(n.name not in meta for n in (gate, up, node)) or meta[gate.name] != meta[up.name] \
                    or meta[node.name] != meta[gate.name]:
                continue
            shape, dtype = meta[gate.name]
            if dtype not in (torch.bfloat16, torch.float16) or g_lin.out_features % GATE_ROWS:
                continue
            out.append(Pattern(owner, "swiglu", (gate.target, up.target), (gate.name, up.name, act.name, node.name),
                               _rows(shape)))
            break
    return out


def _rows(shape: tuple) -> int:
    rows = 1
    for d in shape[:-1]:
        rows *= int(d)
    return rows


# --- scanning a model ---------------------------------------------------------------------------------------
class _Meta(fx.Interpreter):
    """Runs the traced graph and keeps each tensor node's (shape, dtype)."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.meta: dict[str, tuple] = {}

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        if isinstance(out, torch.Tensor):
            self.meta[n.name] = (tuple(out.shape), out.dtype)
        return out


@dataclass
class _Owner:
    """A traced module: its original graph, the patterns found in it, and which of them are routed (with their
    torch_under_compile flag)."""

    graph: fx.Graph
    patterns: dict = field(default_factory=dict)  # key -> Pattern
    routed: dict = field(default_factory=dict)  # key -> torch_under_compile


_OWNERS: "weakref.WeakKeyDictionary[nn.Module, _Owner]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Scan:
    """What scan() found: the patterns, in graph order, and the modules it could not trace or use."""

    patterns: tuple[Pattern, ...]
    untraced: tuple[str, ...] = ()  # "name: why" of each module skipped


def _has_linear(module: nn.Module) -> bool:
    return any(type(m) is nn.Linear for m in module.modules())


def _trace_targets(model: nn.Module) -> tuple[dict[str, tuple[nn.Module, fx.Graph]], list[str]]:
    """{module name: (module, its traced graph)}: the model if it traces, else each child's, recursively;
    modules without an nn.Linear are not traced."""
    traced, skipped = {}, []

    def visit(name: str, module: nn.Module) -> None:
        if not _has_linear(module) or type(module) is nn.Linear:
            return
        state = _OWNERS.get(module)
        if state is not None and "forward" in module.__dict__:
            traced[name] = (module, state.graph)  # rewritten before: its original graph
            return
        try:
            traced[name] = (module, fx.symbolic_trace(module).graph)
            return
        except Exception as err:  # noqa: BLE001 - whatever symbolic tracing raises, the module is skipped
            skipped.append(f"{name or '(model)'}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        for child_name, child in module.named_children():
            visit(f"{name}.{child_name}" if name else child_name, child)

    visit("", model)
    return traced, skipped


def _same(got: Any, want: Any) -> bool:
    leaves_got, leaves_want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    if len(leaves_got) != len(leaves_want):
        return False
    for g, w in zip(leaves_got, leaves_want):
        if isinstance(w, torch.Tensor):
            if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
                return False
            if w.is_floating_point() and not torch.allclose(g.float(), w.float(), rtol=1e-3, atol=1e-3):
                return False
            if not w.is_floating_point() and not torch.equal(g, w):
                return False
    return True


def scan(model: nn.Module, inputs: tuple) -> Scan:
    """Every fusable pattern of `model` (see the module doc). Runs the model once (and each traced graph once)."""
    traced, skipped = _trace_targets(model)
    if not traced:
        return Scan((), tuple(skipped))
    calls: dict[str, list] = {name: [] for name in traced}
    handles = []
    for name, (module, _) in traced.items():
        def hook(mod: nn.Module, args: tuple, kwargs: dict, out: Any, name: str = name) -> None:
            calls[name].append((args, kwargs, out))
        handles.append(module.register_forward_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for handle in handles:
            handle.remove()
    found = []
    for name, (module, graph) in traced.items():
        if len(calls[name]) != 1:
            skipped.append(f"{name or '(model)'}: ran {len(calls[name])} times in the example forward")
            continue
        args, kwargs, want = calls[name][0]
        meta = _meta(module, graph, args, kwargs, want)
        if meta is None:
            skipped.append(f"{name or '(model)'}: its traced graph does not give its output")
            continue
        patterns = _add_patterns(name, module, graph, meta) + _swiglu_patterns(name, module, graph, meta)
        state = _OWNERS.get(module)
        if state is None or state.graph is not graph:
            state = _OWNERS[module] = _Owner(graph)
        state.patterns.update({p.key: p for p in patterns})
        found.extend(patterns)
    return Scan(tuple(found), tuple(skipped))


def _meta(module: nn.Module, graph: fx.Graph, args: tuple, kwargs: dict, want: Any) -> Optional[dict]:
    """Each node's (shape, dtype) from running the traced graph on the module's inputs; None where it fails or
    gives another output than the module's."""
    try:
        gm = fx.GraphModule(module, graph)
        bound = inspect.signature(gm.forward).bind(*args, **kwargs)
        bound.apply_defaults()
        interpreter = _Meta(gm)
        with torch.no_grad():
            got = interpreter.run(*bound.arguments.values())
    except Exception:  # noqa: BLE001 - a graph that does not run is a module left alone
        return None
    return interpreter.meta if _same(got, want) else None


# --- rewriting -----------------------------------------------------------------------------------------
def _buffer_name(pattern: Pattern) -> tuple[str, str]:
    """(the Linears' parent inside the owner, the interleaved weight's buffer name on it)."""
    gate, up = pattern.linears
    parent = gate.rpartition(".")[0]
    return parent, f"{gate.rpartition('.')[2]}_{up.rpartition('.')[2]}_gemmtune_gate_up"


def _set_buffer(module: nn.Module, pattern: Pattern, on: bool) -> None:
    parent_name, buffer = _buffer_name(pattern)
    parent = module.get_submodule(parent_name)
    if on and buffer not in parent._buffers:
        why = gated_available()
        if why is not None:
            raise RuntimeError(why)
        gate, up = (module.get_submodule(t).weight for t in pattern.linears)
        with torch.no_grad():
            parent.register_buffer(buffer, _GATED["interleave_gate_up"](gate.detach(), up.detach()).contiguous(),
                                   persistent=False)
    elif not on and buffer in parent._buffers:
        delattr(parent, buffer)


def _rewrite(graph: fx.Graph, patterns: list[tuple[Pattern, bool]], module: nn.Module) -> fx.Graph:
    """A copy of `graph` with each pattern's nodes replaced by its fused call."""
    new = fx.Graph()
    remap: dict[fx.Node, fx.Node] = {}
    new.output(new.graph_copy(graph, remap))
    by_name = {old.name: remap[old] for old in graph.nodes if old in remap}
    for pattern, under_compile in patterns:
        nodes = [by_name[n] for n in pattern.nodes]
        if pattern.kind == "add":
            lin, add, residual = nodes
            linear = module.get_submodule(lin.target)
            with new.inserting_before(add):
                weight = new.get_attr(f"{lin.target}.weight")
                bias = new.get_attr(f"{lin.target}.bias") if linear.bias is not None else None
                fused = new.call_function(linear_add, (lin.args[0], weight, bias, residual, under_compile))
            add.replace_all_uses_with(fused)
            by_name[add.name] = fused  # another pattern's residual may be this add
            new.erase_node(add)
            new.erase_node(lin)
        else:
            gate, up, act, mul = nodes
            parent, buffer = _buffer_name(pattern)
            with new.inserting_before(mul):
                w_gu = new.get_attr(f"{parent}.{buffer}" if parent else buffer)
                w_gate, w_up = new.get_attr(f"{gate.target}.weight"), new.get_attr(f"{up.target}.weight")
                fused = new.call_function(swiglu, (gate.args[0], w_gu, w_gate, w_up, under_compile))
            mul.replace_all_uses_with(fused)
            by_name[mul.name] = fused
            for node in (mul, act, gate, up):
                new.erase_node(node)
    new.lint()
    return new


def _forward_of(module: nn.Module, graph: fx.Graph) -> Callable:
    """The generated forward of `graph` bound to `module` itself: it reads the module's children and attributes
    as they are when it runs (a swap by optimize()'s other routing is seen)."""
    gm = fx.GraphModule(module, graph)
    return types.MethodType(type(gm).forward, module)


def set_routed(model: nn.Module, pattern: Pattern, routed: bool, torch_under_compile: bool = False) -> None:
    """Route the pattern (its owner's forward rewritten with it and the others routed there) or put it back (the
    owner's class forward again where none is left routed)."""
    module = model.get_submodule(pattern.owner)
    state = _OWNERS[module]
    if routed:
        state.routed[pattern.key] = torch_under_compile
    else:
        state.routed.pop(pattern.key, None)
    if pattern.kind == "swiglu":
        _set_buffer(module, pattern, routed)
    if not state.routed:
        module.__dict__.pop("forward", None)
        return
    chosen = [(state.patterns[key], flag) for key, flag in state.routed.items()]
    module.forward = _forward_of(module, _rewrite(state.graph, chosen, module))


def routed_patterns(module: nn.Module) -> tuple[tuple, ...]:
    """The keys of the patterns routed in `module`'s forward (none where it was not rewritten)."""
    state = _OWNERS.get(module)
    return tuple(state.routed) if state is not None else ()
