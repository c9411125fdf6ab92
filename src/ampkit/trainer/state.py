"""The Trainer's loop counters: where training stands, saved in every checkpoint."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ampkit._validate import is_int
from ampkit.errors import CheckpointError

__all__ = ["TrainerState"]


@dataclass
class TrainerState:
    """Loop counters saved in every checkpoint.

    Attributes:
        step: optimizer steps done (skipped steps included).
        epoch: passes over the training data started.
        batch_in_epoch: micro-batches consumed in the current epoch (per process).
    """

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0

    def state_dict(self) -> dict[str, int]:
        """The counters as plain integers."""
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the counters from :meth:`state_dict`.

        Raises:
            CheckpointError: a counter is missing, unknown, or not an integer >= 0.
        """
        names = {f.name for f in fields(self)}
        if not isinstance(state, dict) or set(state) != names:
            seen = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(
                f"trainer state: expected the keys {sorted(names)}, got {seen}. The checkpoint "
                "was not written by this version of ampkit's Trainer; resume from another one."
            )
        for name in names:
            value = state[name]
            if not is_int(value, 0):
                raise CheckpointError(
                    f"trainer state: {name}={value!r} is invalid; counters are integers >= 0. "
                    "The checkpoint is damaged; resume from another one."
                )
        for name in names:
            setattr(self, name, state[name])
