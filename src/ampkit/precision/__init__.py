"""The precision core: what the hardware runs, the policy, loss scaling, the engine.

Everything else in ampkit (checkpoints, models, the doctor, the Trainer, bench, export, the
command line) is built on this package, and this package imports none of them:

* :mod:`~ampkit.precision.hardware` and :mod:`~ampkit.precision.devices`: what a device
  offers, read without side effects, and the one place for device-type branches;
* :mod:`~ampkit.precision.spelling`: the only precision-name parser, over the names the modes
  declare (no torch);
* :mod:`~ampkit.precision.policy`: a precision and a device into a ``Policy``, the ``auto`` rules;
* :mod:`~ampkit.precision.scaler`: dynamic loss scaling;
* :mod:`~ampkit.precision.engine`: :class:`MixedPrecision`, the loop-level engine;
* :mod:`~ampkit.precision.modes`: one object per precision mode (fp32, mixed, bf16-true,
  fp8), the hooks the engine, the Trainer, bench and the doctor call;
* :mod:`~ampkit.precision.bf16_true` and :mod:`~ampkit.precision.fp8`: the low-precision
  weight and matmul machinery those modes use;
* shared assets: :mod:`~ampkit.precision.batches` (how a batch becomes a loss),
  :mod:`~ampkit.precision.stats` (range statistics), :mod:`~ampkit.precision.fp32_modules`
  (modules kept in fp32 under autocast), :mod:`~ampkit.precision.float_formats` (number formats from ``torch.finfo``),
  :mod:`~ampkit.precision.inference` (``predict``).

Import from the submodules. The one import here is :mod:`~ampkit.precision.modes` (torch-free):
it registers the built-in modes' precisions (:mod:`~ampkit.precision.spelling`), so every
submodule finds them, whichever is imported first; ``import ampkit.precision`` imports no torch.
"""

from ampkit.precision import modes as modes  # registers the built-in precisions
