"""AMP011: gradient accumulation whose loss is not divided by the number of micro-steps."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.flow import exclusive
from ampkit.lint.rules.base import Rule, register

__all__ = ["UndividedAccumulatedLoss"]


def _has_division(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.BinOp, ast.AugAssign)) and isinstance(sub.op, (ast.Div, ast.Mult)):
            return True
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("div", "div_", "mul", "mul_", "true_divide")
        ):
            return True
    return False


def _loss_divided(analysis: FileAnalysis, loss: ast.expr | None) -> bool:
    """Whether the loss (or any assignment to its variable) divides or scales it."""
    if loss is None or _has_division(loss):
        return True
    key = ast.unparse(loss)
    for value in analysis.facts.assignments.get(key, []):
        if _has_division(value):
            return True
        if isinstance(value, ast.Call):
            func = value.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            callee = analysis.facts.functions.get(name) or _method(analysis, name)
            if callee is not None and _has_division(callee):
                return True
    return False


def _method(analysis: FileAnalysis, name: str) -> ast.AST | None:
    for node in analysis.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


@register
class UndividedAccumulatedLoss(Rule):
    """Gradient accumulation where the loss is not divided by the number of micro-steps.

    Gradients of ``n`` backward passes add up. Without ``loss / n`` the effective learning
    rate is ``n`` times larger than with one big batch, and with fp16 the summed, scaled
    gradients overflow ``n`` times sooner (more skipped steps).

    Bad::

        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            if (i + 1) % accum_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()

    Good::

        for i, (x, y) in enumerate(loader):
            loss = loss_fn(model(x), y) / accum_steps
            scaler.scale(loss).backward()
            if (i + 1) % accum_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
    """

    code = "AMP011"
    name = "undivided-accumulated-loss"
    severity = Severity.WARNING
    summary = "Gradient accumulation (stepping every N iterations) with a loss not divided by N."

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        for unit in analysis.units:
            steps = [s for s in unit.of("scaler_step", "opt_step") if s.ctx.accum and s.loops]
            for b in unit.of("backward"):
                if b.framework or b.ctx.accum or not b.loops:
                    continue
                step = next(
                    (s for s in steps if s.loops[-1] == b.loops[-1] and not exclusive(s, b)), None
                )
                if step is None or _loss_divided(analysis, b.loss):
                    continue
                yield self.finding(
                    analysis,
                    b.node,
                    f"gradients are accumulated over {step.ctx.accum} iterations but the loss is not "
                    f"divided by {step.ctx.accum}",
                )
