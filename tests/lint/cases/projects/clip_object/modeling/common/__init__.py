"""A package that re-exports its clip object."""

from .clip_grad import ClipGrad, Logger, clip_all, unscale_clip_step

__all__ = ["ClipGrad", "Logger", "clip_all", "unscale_clip_step"]
