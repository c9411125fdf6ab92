"""``fp8_plan``: which ``nn.Linear`` layers to train in fp8, decided per layer and measured.

For every Linear (subclasses included) the plan records its shape at the real batch, then
decides in order:

0. kind: a subclass whose forward is not Linear's is kept, with the reason
   (:func:`~ampkit.precision.fp8.convert.linear_kept_reason`);
1. shape: both dims divisible by 16 (fp8 tensor-core requirement), else no;
2. numerics: the share of the layer's input (e4m3) and output gradient (e5m2) values that
   underflow or turn subnormal after per-tensor scaling, as the doctor measures it; above
   ``max_lost`` (1%), no;
3. speed: on CUDA, the measured speed-up of the layer's compiled forward+backward in fp8 over
   bf16 at the real batch shape (:mod:`ampkit.precision.fp8.microbench`); at least ``min_speedup``, yes;
   without CUDA, torchao's documented size thresholds for the recipe (H100-tuned) are the
   prior, and the predicted speed-up is shown for information.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch
from torch import nn

from ampkit._text_table import text_table
from ampkit.errors import ConfigurationError
from ampkit.precision.batches import batch_loss
from ampkit.precision.fp8.convert import RECIPES, linear_kept_reason
from ampkit.precision.stats import RangeStats, format_limits

__all__ = [
    "Fp8Plan",
    "LayerDecision",
    "check_module_filter",
    "fp8_plan",
    "predicted_speedup",
    "size_prior",
]

#: Published torchao tensorwise speed-ups (H100, forward+backward, compiled) that the predicted
#: column interpolates between, on log2(M*K*N): (1024, 2048, 1024) -> 0.80x and
#: (4096, 8192, 16384) -> 1.39x.
_ANCHORS = ((31.0, 0.80), (39.0, 1.39))


def predicted_speedup(tokens: int, in_features: int, out_features: int) -> float:
    """fp8-over-bf16 speed-up interpolated (log-linear in M*K*N, clamped to 0.5..1.5) from
    torchao's published tensorwise figures: a prior, not a measurement."""
    (x0, y0), (x1, y1) = _ANCHORS
    x = math.log2(max(tokens * in_features * out_features, 1))
    return min(1.5, max(0.5, y0 + (y1 - y0) * (x - x0) / (x1 - x0)))


def size_prior(recipe: str, in_features: int, out_features: int) -> tuple[bool, str]:
    """torchao's documented size thresholds for ``recipe`` (K = in, N = out features).

    tensorwise skips K <= 4096 and N <= 1024; rowwise skips N <= 2048, K <= 1024, and
    N <= 4096 with K <= 2048. torchao has no prior for rowwise_with_gw_hp; the rowwise one is
    used.
    """
    k, n = in_features, out_features
    if recipe == "tensorwise":
        if k <= 4096 and n <= 1024:
            return False, "below torchao's tensorwise size prior (K <= 4096 and N <= 1024)"
        return True, "above torchao's tensorwise size prior"
    if n <= 2048 or k <= 1024 or (n <= 4096 and k <= 2048):
        return (
            False,
            "below torchao's rowwise size prior (N <= 2048, K <= 1024, or N <= 4096 with K <= 2048)",
        )
    return True, "above torchao's rowwise size prior"


@dataclass(frozen=True)
class LayerDecision:
    """One row of the plan.

    Attributes:
        name: the Linear's module name.
        in_features, out_features: K and N.
        tokens: M, rows of the input at the example batch (None without one).
        predicted_speedup: interpolated prior (None without ``tokens``).
        measured_speedup: bf16 time / fp8 time on this GPU (None without CUDA).
        input_lost: share of the input's non-zero values that e4m3 flushes or makes subnormal.
        grad_lost: the same for the output gradient in e5m2.
        fp8: the decision.
        reason: why, in a few words.
        recipe_errors: the worst relative GEMM error of each torchao recipe on the example
            batch, emulated (:func:`~ampkit.precision.fp8.recipes.recipe_errors`); None
            without a batch.
        recommended_recipe: the recipe recommended for this layer from those errors (and,
            on CUDA, the measured speed of each recipe); None without a batch.
    """

    name: str
    in_features: int
    out_features: int
    tokens: int | None
    predicted_speedup: float | None
    measured_speedup: float | None
    input_lost: float | None
    grad_lost: float | None
    fp8: bool
    reason: str
    recipe_errors: dict[str, float] | None = None
    recommended_recipe: str | None = None


@dataclass(frozen=True)
class Fp8Plan:
    """The per-layer fp8 decision for one model: apply it with
    ``MixedPrecision("fp8", fp8_plan=plan)`` or ``Trainer(precision="fp8", fp8_plan=plan)``.

    Attributes:
        recipe: the torchao recipe the plan was made for.
        layers: one :class:`LayerDecision` per ``nn.Linear`` (subclasses included), in model
            order.
        measured: whether speed-ups were measured (CUDA) rather than taken from the prior.
    """

    recipe: str
    layers: tuple[LayerDecision, ...]
    measured: bool

    @property
    def layer_recipes(self) -> dict[str, str]:
        """The recipe each selected layer trains in (recorded in checkpoints)."""
        return {name: self.recipe for name in self.selected}

    @property
    def selected(self) -> tuple[str, ...]:
        """Names of the layers to convert to fp8."""
        return tuple(d.name for d in self.layers if d.fp8)

    def excluding(self, modules: Iterable[str], reason: str) -> Fp8Plan:
        """This plan with the layers named in ``modules`` (or inside them) left in bf16."""
        names = tuple(modules)
        prefixes = tuple(f"{n}." for n in names if n)

        def hit(layer: str) -> bool:
            return "" in names or layer in names or layer.startswith(prefixes)

        layers = tuple(
            replace(d, fp8=False, reason=reason) if d.fp8 and hit(d.name) else d
            for d in self.layers
        )
        return replace(self, layers=layers)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready values."""
        return {
            "recipe": self.recipe,
            "measured": self.measured,
            "layers": [asdict(d) for d in self.layers],
        }

    def to_json(self) -> str:
        """The plan as JSON (non-finite numbers as null)."""
        return json.dumps(self.to_dict(), indent=2)

    def to_text(self) -> str:
        """The plan as a table: layer, shape, predicted/measured speed-up, numerics, decision."""

        def pct(v: float | None) -> str:
            return "-" if v is None else f"{100 * v:.2f}%"

        def x(v: float | None) -> str:
            return "-" if v is None else f"{v:.2f}x"

        rows = [
            (
                "layer",
                "M x K x N",
                "predicted",
                "measured",
                "e4m3 in lost",
                "e5m2 grad lost",
                "fp8",
                "reason",
                "error t / r / gw",
                "recommended",
            )
        ]
        for d in self.layers:
            shape = (
                f"{d.tokens if d.tokens is not None else '?'} x {d.in_features} x {d.out_features}"
            )
            rows.append(
                (
                    d.name,
                    shape,
                    x(d.predicted_speedup),
                    x(d.measured_speedup),
                    pct(d.input_lost),
                    pct(d.grad_lost),
                    "yes" if d.fp8 else "no",
                    d.reason,
                    _errors_text(d.recipe_errors),
                    d.recommended_recipe or "-",
                )
            )
        lines = text_table(rows, rule=False)
        how = (
            "measured on this GPU" if self.measured else "no CUDA: speed from torchao's size prior"
        )
        head = f"fp8 plan ({self.recipe}; {how}): {len(self.selected)} of {len(self.layers)} Linear layers in fp8"
        from ampkit.precision.fp8.recipes import DEFAULT_WHY

        foot = (
            "recipe errors: worst mean per-row relative GEMM error (output, input and weight "
            "gradients) of "
            "tensorwise / rowwise / rowwise_with_gw_hp, emulated on the example batch; "
            f"{DEFAULT_WHY}"
        )
        return "\n".join([head, *lines, foot])


#: Rows of each Linear's input and output gradient kept to measure the recipes' errors.
_SAMPLE_ROWS = 1024


def _errors_text(errors: dict[str, float] | None) -> str:
    if not errors:
        return "-"
    return " / ".join(f"{100 * errors[r]:.2f}%" for r in RECIPES if r in errors)


def _observe(
    model: nn.Module,
    run: Callable[[], torch.Tensor],
    samples: dict[str, list[torch.Tensor]] | None = None,
) -> dict[str, tuple[int, RangeStats, RangeStats]]:
    """Run one fp32 forward+backward; per Linear: rows of its input, input and grad stats
    (and, into ``samples``, the first rows of its first input and output gradient)."""
    limits = {k: v for k, v in format_limits().items() if k.startswith("fp8")}
    seen: dict[str, tuple[int, RangeStats, RangeStats]] = {}
    handles = []

    def hook(name: str) -> Callable[..., None]:
        def forward(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> None:
            x = args[0]
            rows = x.numel() // max(x.shape[-1], 1)
            _, inputs, grads = seen.setdefault(name, (rows, RangeStats(limits), RangeStats(limits)))
            inputs.add(x)
            keep = samples is not None and name not in samples
            if keep:
                samples[name] = [x.detach().reshape(-1, x.shape[-1])[:_SAMPLE_ROWS].clone()]  # type: ignore[index]
            if output.requires_grad:

                def on_grad(g: torch.Tensor) -> None:
                    grads.add(g)
                    if keep and len(samples[name]) == 1:  # type: ignore[index]
                        rows = g.detach().reshape(-1, g.shape[-1])[:_SAMPLE_ROWS].clone()
                        samples[name].append(rows)  # type: ignore[index]

                output.register_hook(on_grad)

        return forward

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            handles.append(module.register_forward_hook(hook(name)))
    params = list(model.parameters())
    saved = [p.grad for p in params]
    try:
        for p in params:
            p.grad = None
        with torch.autocast(next(iter(params)).device.type if params else "cpu", enabled=False):
            loss = run()
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.requires_grad:
            raise ConfigurationError(
                "fp8_plan: the example batch must give a scalar loss that requires grad (the "
                "model's loss, or loss_fn(model(inputs), targets)); got "
                f"{type(loss).__name__}{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}."
            )
        loss.backward()
    finally:
        for h in handles:
            h.remove()
        for p, g in zip(params, saved, strict=True):
            p.grad = g
    return seen


def _lost(stats: RangeStats, fmt: str) -> float | None:
    if stats.count == 0 or fmt not in stats.limits:
        return None
    return stats.fit(fmt).lost


def fp8_plan(
    model: nn.Module,
    example_batch: Any = None,
    *,
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None,
    closure: Callable[[], torch.Tensor] | None = None,
    recipe: str = "tensorwise",
    measure: bool | None = None,
    max_lost: float = 0.01,
    min_speedup: float = 1.0,
    use_size_prior: bool = True,
    exclude: Iterable[str] = (),
) -> Fp8Plan:
    """Decide, per ``nn.Linear`` of ``model`` (subclasses included), whether to train it in fp8 (module doc: rules).

    Args:
        model: the fp32 model, not yet converted or wrapped.
        example_batch: one real batch (Trainer convention: ``model(batch)`` returns the loss,
            or ``(inputs, targets)`` with ``loss_fn``). Its shape sets M for each layer.
        loss_fn: as the Trainer's.
        closure: instead of a batch, a function running the forward pass and returning the
            loss (the doctor's convention).
        recipe: ``tensorwise``, ``rowwise`` or ``rowwise_with_gw_hp``.
        measure: time each layer on the GPU; None: when the model is on CUDA.
        max_lost: largest share of lost input/gradient values accepted.
        min_speedup: smallest measured speed-up that converts a layer.
        use_size_prior: where nothing was measured, apply torchao's size thresholds; False
            converts every layer that passes the shape and numerics rules (emulated runs).
        exclude: module names to leave in bf16, with the layers inside them (the LM head, a
            router). Every name must be a module of ``model``.

    With a batch or closure every layer also gets each recipe's emulated error and a
    recommended recipe (:mod:`ampkit.precision.fp8.recipes`; the plan still applies
    ``recipe`` to every selected layer).

    Without a batch or closure only the shape rules and the size prior decide.

    Raises:
        ConfigurationError: unknown recipe, both a batch and a closure, ``measure=True``
            off CUDA, a batch that does not give a scalar loss, or an ``exclude`` name that
            matches no module (one line listing them).
    """
    if recipe not in RECIPES:
        raise ConfigurationError(
            f"fp8_plan: recipe={recipe!r} is unknown. Use one of {', '.join(RECIPES)}."
        )
    if example_batch is not None and closure is not None:
        raise ConfigurationError("fp8_plan: pass example_batch or closure, not both.")
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if measure is None:
        measure = device.type == "cuda"
    if measure and device.type != "cuda":
        raise ConfigurationError(
            f"fp8_plan: measure=True needs the model on a CUDA device, but it is on {device}. "
            "Move the model to the GPU, or pass measure=None to use the size prior."
        )
    excluded = check_module_filter(model, exclude, "exclude")
    seen: dict[str, tuple[int, RangeStats, RangeStats]] = {}
    samples: dict[str, list[torch.Tensor]] = {}
    if closure is not None or example_batch is not None:
        run = closure or (lambda: batch_loss(model, example_batch, loss_fn))
        seen = _observe(model, run, samples)
    timings: dict[tuple[int, int, int], float] = {}
    decisions = []
    for name, module in model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        kept = linear_kept_reason(module)
        k, n = module.in_features, module.out_features
        tokens, inputs, grads = seen.get(name, (None, None, None))
        input_lost = _lost(inputs, "fp8_e4m3") if inputs is not None else None
        grad_lost = _lost(grads, "fp8_e5m2") if grads is not None else None
        predicted = predicted_speedup(tokens, k, n) if tokens else None
        measured = None
        errors, recommended = _recipes(module, samples.get(name), measure, device)
        if kept is not None:
            fp8, reason = False, f"kept: {kept}"
        elif _inside(name, excluded):
            fp8, reason = False, "excluded (exclude=)"
        elif k % 16 or n % 16:
            fp8, reason = False, f"K={k} or N={n} not divisible by 16"
        elif max(input_lost or 0.0, grad_lost or 0.0) > max_lost:
            worst = max(input_lost or 0.0, grad_lost or 0.0)
            fp8, reason = (
                False,
                f"{100 * worst:.1f}% of values lost in fp8 (limit {100 * max_lost:g}%)",
            )
        elif measure and tokens:
            from ampkit.precision.fp8.microbench import time_linear

            key = (tokens, k, n)
            if key not in timings:
                bf16_ms, fp8_ms = time_linear(tokens, k, n, recipe, device)
                timings[key] = bf16_ms / fp8_ms
            measured = timings[key]
            fp8 = measured >= min_speedup
            reason = f"measured {measured:.2f}x {'>=' if fp8 else '<'} {min_speedup:g}x"
        elif use_size_prior:
            fp8, reason = size_prior(recipe, k, n)
        else:
            fp8, reason = True, "shape and numerics pass (size prior not applied)"
        decisions.append(
            LayerDecision(
                name,
                k,
                n,
                tokens,
                predicted,
                measured,
                input_lost,
                grad_lost,
                fp8,
                reason,
                errors,
                recommended,
            )
        )
    return Fp8Plan(recipe=recipe, layers=tuple(decisions), measured=bool(timings))


def check_module_filter(model: nn.Module, names: Iterable[str], argument: str) -> tuple[str, ...]:
    """Return ``names`` if every one is a module of ``model``.

    Raises:
        ConfigurationError: one line listing the names that match no module (a stale filter
            would otherwise leave the layer it meant in fp8, silently).
    """
    wanted = tuple(names)
    modules = {n for n, _ in model.named_modules()}
    stale = [n for n in wanted if n not in modules]
    if stale:
        import difflib

        hints = [
            f"{n!r}"
            + (
                f" (did you mean {m[0]!r}?)"
                if (m := difflib.get_close_matches(n, modules, 1))
                else ""
            )
            for n in stale
        ]
        raise ConfigurationError(
            f"fp8_plan: {argument} names {len(stale)} module(s) that match no module of "
            f"{type(model).__name__}: {', '.join(hints)}. Use names as model.named_modules() "
            "spells them.",
            argument=argument,
        )
    return wanted


def _inside(name: str, modules: tuple[str, ...]) -> bool:
    return any(name == m or name.startswith(f"{m}.") or m == "" for m in modules)


def _recipes(
    module: nn.Linear, sample: list[torch.Tensor] | None, measure: bool, device: torch.device
) -> tuple[dict[str, float] | None, str | None]:
    """Each recipe's emulated error on the layer's sample, and the recommended recipe (on
    CUDA with ``measure``: from the speed of each recipe too)."""
    if not sample:
        return None, None
    from ampkit.precision.fp8.recipes import recipe_errors, recommend_recipe

    errors = recipe_errors(sample[0], module.weight, sample[1] if len(sample) > 1 else None)
    speedups = None
    if measure:
        from ampkit.precision.fp8.microbench import time_linear

        rows = sample[0].shape[0]
        speedups = {}
        for recipe in errors:
            bf16_ms, fp8_ms = time_linear(
                rows, module.in_features, module.out_features, recipe, device
            )
            speedups[recipe] = bf16_ms / fp8_ms
    return errors, recommend_recipe(errors, speedups)
