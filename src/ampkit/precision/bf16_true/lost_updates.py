"""Lost updates: how much of an optimizer step the bf16 weights failed to store.

With round-to-nearest, a bf16 weight ``w`` ignores every update smaller than half its ulp
(``|Δw| < 2**(floor(log2|w|) - 8)``): a weight of magnitude 1 does not move for an update of
1e-4, however many steps in a row ask for it. The probe counts, per parameter tensor, the
elements whose intended update was non-zero but whose stored value did not change.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["LOST_UPDATES_WARN_AT", "LostUpdates", "lost_update_counts", "lost_update_fraction"]

#: Share of intended updates rounded away above which the Trainer and the doctor warn.
LOST_UPDATES_WARN_AT = 0.1


def lost_update_counts(
    before: torch.Tensor, after: torch.Tensor, intended: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(lost, wanted)`` as 0-d int64 tensors on the tensors' device (no host sync).

    ``wanted``: elements whose intended update is non-zero; ``lost``: those of them whose
    stored value is unchanged (``after == before``). Compare the *effective* weight: for
    Kahan-compensated storage, weight plus compensation buffer.

    Raises:
        ValueError: the three tensors do not have one shape.
    """
    if not before.shape == after.shape == intended.shape:
        raise ValueError(
            f"lost_update_counts: shapes differ: before {tuple(before.shape)}, after "
            f"{tuple(after.shape)}, intended {tuple(intended.shape)}. Pass one parameter's "
            "values before and after the step and its intended update."
        )
    wanted = intended != 0
    lost = wanted & (after == before)
    return lost.sum(), wanted.sum()


def lost_update_fraction(
    before: torch.Tensor, after: torch.Tensor, intended: torch.Tensor
) -> float:
    """Fraction of the elements with a non-zero intended update whose value did not change.

    0.0 when no element wanted to move. One host sync.

    Raises:
        ValueError: the three tensors do not have one shape.
    """
    lost, wanted = lost_update_counts(before, after, intended)
    lost_n, wanted_n = torch.stack([lost, wanted]).tolist()
    return lost_n / wanted_n if wanted_n else 0.0


@dataclass(frozen=True)
class LostUpdates:
    """Lost updates of one optimizer step, per tensor and overall: the weights, and apart
    from them the optimizer's state (momentum, second moment) of the bf16 parameters.

    Attributes:
        per_tensor: parameter name -> fraction of its wanted updates that were lost.
        lost: elements whose update was lost, over all tensors.
        wanted: elements with a non-zero intended update, over all tensors.
        compensation: the update compensation in force (``kahan``, ``stochastic``, ``none``).
        state_per_tensor: ``<parameter>.<state key>`` -> lost share of that state tensor
            (0.0 for every tensor when the state is kept in fp32: nothing is rounded).
        state_lost: state elements whose update was rounded away, over all state tensors.
        state_wanted: state elements with a non-zero intended update.
        state_precision: how the state is stored (``fp32``, ``bf16-stochastic``,
            ``bf16-kahan``, ``bf16``).
    """

    per_tensor: dict[str, float]
    lost: int
    wanted: int
    compensation: str
    state_per_tensor: dict[str, float] = field(default_factory=dict)
    state_lost: int = 0
    state_wanted: int = 0
    state_precision: str = "fp32"

    @property
    def fraction(self) -> float:
        """Lost over wanted, over every tracked weight tensor (0.0 when nothing wanted to
        move)."""
        return self.lost / self.wanted if self.wanted else 0.0

    @property
    def state_fraction(self) -> float:
        """Lost over wanted, over every tracked state tensor (0.0 under fp32 state)."""
        return self.state_lost / self.state_wanted if self.state_wanted else 0.0

    @property
    def alarming(self) -> bool:
        """Weights above :data:`LOST_UPDATES_WARN_AT`, where the loss is real: under stochastic
        rounding a step's rounded-away update is kept in expectation, so it never alarms."""
        return self.compensation != "stochastic" and self.fraction > LOST_UPDATES_WARN_AT

    @property
    def state_alarming(self) -> bool:
        """State above :data:`LOST_UPDATES_WARN_AT` under round-to-nearest (``bf16``): the
        stored moments drift from what the optimizer computed."""
        return self.state_precision == "bf16" and self.state_fraction > LOST_UPDATES_WARN_AT
