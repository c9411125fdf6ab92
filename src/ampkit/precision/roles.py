"""Modules by role: the routers of mixture-of-experts layers and the LM head.

Both are small in FLOPs and large in consequence: a router computed in bf16 picks other experts
for tokens whose top scores are close (an fp32 router GEMM is what serving and training
projects now keep by hand), and an LM head in bf16 rounds the logits the loss and the sampler
read. :func:`find_roles` names them from one forward pass:

* a router is the module inside which, or right after which, ``torch.topk`` runs over a
  tensor whose last dimension is the number of experts: a Hugging Face ``*TopKRouter``
  (Mixtral, Qwen2-MoE, ... in transformers v5, where the router takes the top-k itself), or the
  last ``nn.Linear`` child of the module taking the top-k, whose output has that width (the
  older ``gate = nn.Linear(hidden, num_experts)`` layout, and any hand-written MoE);
* the LM head is ``model.get_output_embeddings()`` (Hugging Face), else a module named
  ``lm_head``.

:func:`router_topk` records the experts each router picked in one forward, so two runs (fp32
and bf16) can be compared: :func:`topk_agreement`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["Roles", "find_roles", "may_route", "router_topk", "topk_agreement"]


@dataclass(frozen=True)
class Roles:
    """The modules of a model by role (names as ``model.named_modules()`` spells them).

    Attributes:
        routers: the MoE routers, in the order they ran.
        head: the LM head, or None.
    """

    routers: tuple[str, ...] = ()
    head: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """Routers then the head: the default fp32 islands of their role."""
        return (*self.routers, *((self.head,) if self.head else ()))


@dataclass
class _Trace(TorchFunctionMode):
    """Follows the module stack through forward hooks and records each ``torch.topk``: the
    router it belongs to and the indices it chose."""

    names: dict[int, str]
    stack: list[str] = field(default_factory=list)
    last_child: dict[str, tuple[str, int]] = field(default_factory=dict)
    picks: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    widths: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in (torch.topk, torch.Tensor.topk) and self.stack:
            scores = args[0]
            width = scores.shape[-1]
            inner = self.stack[-1]
            child = self.last_child.get(inner)
            router = child[0] if child is not None and child[1] == width else inner
            indices = out[1] if isinstance(out, tuple) else out.indices
            self.picks.append((router, indices.detach().reshape(-1, indices.shape[-1]).clone()))
            self.widths[router] = width
        return out


def _hooks(model: nn.Module, trace: _Trace) -> list[Any]:
    handles = []
    for name, module in model.named_modules():

        def enter(module: nn.Module, args: Any, name: str = name) -> None:
            trace.stack.append(name)

        def leave(module: nn.Module, args: Any, output: Any, name: str = name) -> None:
            if trace.stack and trace.stack[-1] == name:
                trace.stack.pop()
            if trace.stack and isinstance(output, torch.Tensor) and output.dim() > 0:
                trace.last_child[trace.stack[-1]] = (name, output.shape[-1])

        handles.append(module.register_forward_pre_hook(enter))
        handles.append(module.register_forward_hook(leave, always_call=True))
    return handles


def router_topk(model: nn.Module, run: Callable[[], Any]) -> list[tuple[str, torch.Tensor]]:
    """Run ``run()`` (a forward of ``model``) once and return, per ``torch.topk`` over
    experts in it, ``(router name, the chosen expert indices as (tokens, k))``, in order.
    The model is left as it was (hooks removed)."""
    trace = _Trace({id(m): n for n, m in model.named_modules()})
    handles = _hooks(model, trace)
    try:
        with trace, torch.no_grad():
            run()
    finally:
        for handle in handles:
            handle.remove()
    return trace.picks


#: Class or module names that may hold a router: only such models need the forward pass.
_MAY_ROUTE = re.compile(r"router|moe|expert|gate", re.I)


def may_route(model: nn.Module) -> bool:
    """Whether a module of ``model`` is called (or its class named) like a router, an MoE
    block or an expert: only then does :func:`find_roles` need a forward pass."""
    return any(
        _MAY_ROUTE.search(type(m).__name__) or _MAY_ROUTE.search(n.rpartition(".")[2])
        for n, m in model.named_modules()
    )


def find_roles(model: nn.Module, run: Callable[[], Any] | None = None) -> Roles:
    """The routers (from one forward, ``run()``, run only when :func:`may_route`; none
    without it) and the LM head of ``model``."""
    head = None
    get = getattr(model, "get_output_embeddings", None)
    found = get() if callable(get) else None
    names = {id(m): n for n, m in model.named_modules()}
    if isinstance(found, nn.Module) and id(found) in names:
        head = names[id(found)]
    elif "lm_head" in dict(model.named_modules()):
        head = "lm_head"
    routers: list[str] = []
    if run is not None and may_route(model):
        for router, _ in router_topk(model, run):
            if router not in routers and router:
                routers.append(router)
    return Roles(tuple(routers), head)


def topk_agreement(
    reference: list[tuple[str, torch.Tensor]], other: list[tuple[str, torch.Tensor]]
) -> float:
    """The share of (token, router) pairs whose chosen set of experts is the same in both
    recordings of :func:`router_topk` (1.0: every token went to the same experts).

    Raises:
        ValueError: the recordings are of different routers or shapes.
    """
    same = total = 0
    if [r for r, _ in reference] != [r for r, _ in other]:
        raise ValueError("topk_agreement: the two recordings ran different routers")
    for (_, a), (_, b) in zip(reference, other, strict=True):
        if a.shape != b.shape:
            raise ValueError(f"topk_agreement: shapes {tuple(a.shape)} and {tuple(b.shape)}")
        equal = (a.sort(dim=-1).values == b.sort(dim=-1).values).all(dim=-1)
        same += int(equal.sum())
        total += equal.numel()
    return same / total if total else 1.0
