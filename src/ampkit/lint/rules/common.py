"""Queries over a unit's flow that several rules share."""

from __future__ import annotations

from ampkit.lint.analysis import Unit
from ampkit.lint.events import Event, exclusive

__all__ = ["current_backward", "last_before", "scaling_decided_by_branch"]


def last_before(unit: Unit, event: Event, *kinds: str) -> list[Event]:
    """Events of ``kinds`` before ``event`` that can run with it, nearest first."""
    return [
        e
        for e in reversed(unit.related(event, *kinds))
        if e.order < event.order and not exclusive(e, event)
    ]


def current_backward(unit: Unit, event: Event) -> Event | None:
    """The scaled backward of the step ``event`` belongs to: the nearest one before it, when
    no ``scaler.step``/``update`` separates them."""
    for b in last_before(unit, event, "backward"):
        if not b.scaled:
            continue
        if unit.between(b, event, "scaler_step", "scaler_update"):
            return None
        return b
    return None


def scaling_decided_by_branch(unit: Unit, event: Event) -> bool:
    """Whether ``event`` sits in the arm of a condition whose other arm scales the loss.

    ``if use_grad_scaling: loss = scaler.scale(loss) ... else: optimizer.step()``: the
    condition chooses between scaled and unscaled training, whatever it is called, so the
    unscaled arm is not mixing the two.
    """
    if not event.ctx.arms:
        return False
    return any(
        exclusive(e, event)
        for e in unit.related(event, "scale", "backward")
        if e.kind == "scale" or e.scaled
    )
