"""Lost updates: how much of an optimizer step the bf16 weights failed to store.

With round-to-nearest, a bf16 weight ``w`` ignores every update smaller than half its ulp
(``|Δw| < 2**(floor(log2|w|) - 8)``): a weight of magnitude 1 does not move for an update of
1e-4, however many steps in a row ask for it. The probe counts, per parameter tensor, the
elements whose intended update was non-zero but whose stored value did not change.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """Lost updates of one optimizer step, per parameter tensor and overall.

    Attributes:
        per_tensor: parameter name -> fraction of its wanted updates that were lost.
        lost: elements whose update was lost, over all tensors.
        wanted: elements with a non-zero intended update, over all tensors.
        compensation: the update compensation in force (``kahan``, ``stochastic``, ``none``).
    """

    per_tensor: dict[str, float]
    lost: int
    wanted: int
    compensation: str

    @property
    def fraction(self) -> float:
        """Lost over wanted, over every tracked tensor (0.0 when nothing wanted to move)."""
        return self.lost / self.wanted if self.wanted else 0.0

    @property
    def alarming(self) -> bool:
        """Above :data:`LOST_UPDATES_WARN_AT`, where the loss is real: under stochastic
        rounding a step's rounded-away update is kept in expectation, so it never alarms."""
        return self.compensation != "stochastic" and self.fraction > LOST_UPDATES_WARN_AT
