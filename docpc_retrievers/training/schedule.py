"""The learning-rate schedule: linear warm-up, then constant or linear decay to zero at the last step."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["lr_factor"]


def lr_factor(schedule: str, total_steps: int, warmup: int) -> Callable[[int], float]:
    """The multiplier of the base learning rate at each step (for ``torch.optim.lr_scheduler.LambdaLR``).

    ``schedule``: ``constant`` or ``linear``; ``warmup`` steps ramp up first. A resumed run that
    extends ``total_steps`` recomputes the decay for the new total.
    """

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / (warmup + 1)
        if schedule == "constant":
            return 1.0
        remaining = max(total_steps - step, 0)
        return max(remaining / max(total_steps - warmup, 1), 0.0)

    return factor
