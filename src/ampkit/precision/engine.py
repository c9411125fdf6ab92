"""``MixedPrecision``: the mixed-precision engine for a training loop you write yourself.

One iteration, with the engine's work marked::

    with mp.accumulate(model):              # DDP: no all-reduce on non-final micro-batches
        with mp.autocast():                 # matmul/conv in the policy's low precision
            loss = loss_fn(model(x), y)
        mp.backward(loss)                   # loss / grad_accum_steps, * scale (fp16), backward
    result = mp.step(optimizer)             # on the last micro-batch of the window:
                                            #   unscale_ -> clip -> step unless inf/nan
                                            #   -> scale update -> zero_grad(set_to_none=True)

In fp32 the engine adds nothing: the updates are bitwise those of the plain PyTorch loop.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch

from ampkit._kwargs import check_keywords
from ampkit._validate import is_int, is_number
from ampkit.errors import CheckpointError, ConfigurationError, ScalerStateError
from ampkit.precision.contract import DtypeContract, check_dtype_contract
from ampkit.precision.modes import PrecisionMode, precision_mode
from ampkit.precision.policy import Policy, precision_session, resolve_precision
from ampkit.precision.scaler import LossScaler, ScalerStats

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import LRScheduler

__all__ = ["MixedPrecision", "StepResult", "clip_order", "loss_tensor", "validate_param_dtypes"]


#: The constructor's own keywords (for the did-you-mean of a mistyped one).
_KEYWORDS = (
    "precision",
    "device",
    "grad_accum_steps",
    "max_grad_norm",
    "scaler",
    "tf32",
    "process_group",
)


def validate_param_dtypes(optimizer: torch.optim.Optimizer, policy: Policy) -> None:
    """Refuse fp16/bf16 parameters the precision does not expect.

    Mixed precision keeps the weights (and the optimizer's update) in fp32 and lets autocast
    cast them per op. fp16 weights under a loss scaler lose every update smaller than half an
    fp16 ulp and overflow to inf/NaN while the step still reports success; bf16 weights lose
    small updates the same way. Only a policy whose ``param_dtype`` is low precision
    (``"bf16-true"``: pure bf16) may hold weights of that dtype.

    Raises:
        ConfigurationError: a parameter of ``optimizer`` is fp16 or bf16 and the policy's
            precision does not hold weights of that dtype.
    """
    allowed = policy.param_dtype
    for index, group in enumerate(optimizer.param_groups):
        for param in group["params"]:
            dtype = param.dtype
            if dtype not in (torch.float16, torch.bfloat16) or dtype == allowed:
                continue
            count = sum(p.dtype == dtype for g in optimizer.param_groups for p in g["params"])
            name = "fp16" if dtype == torch.float16 else "bf16"
            why = (
                "fp16 weights under the loss scaler lose small updates and turn inf/NaN while "
                "steps still report success"
                if policy.uses_scaler
                else f"{name} weights lose every update smaller than half a {name} ulp"
            )
            hint = (
                " For pure bf16 weights ask for that precision by name ('bf16-true')."
                if dtype == torch.bfloat16
                else ""
            )
            raise ConfigurationError(
                f"MixedPrecision({policy.precision!r}): {count} of the optimizer's parameters "
                f"are {name} (the first in param group {index}, shape {tuple(param.shape)}); "
                f"{why}. Mixed precision keeps the weights in fp32 and autocast casts them per "
                "op: build the model in fp32 (drop .half(), .bfloat16() or .to(dtype) on it)."
                f"{hint}"
            )


def loss_tensor(loss: Any) -> torch.Tensor:
    """The loss tensor in ``loss``: a tensor, an object with a ``.loss`` tensor (a Hugging Face
    ``ModelOutput``), or a dict with a ``"loss"`` tensor.

    Raises:
        ConfigurationError: none of these, or a ``.loss`` that is None (the model was not
            given labels).
    """
    if isinstance(loss, torch.Tensor):
        return loss
    found = loss.get("loss") if isinstance(loss, dict) else getattr(loss, "loss", None)
    if isinstance(found, torch.Tensor):
        return found
    has_field = (isinstance(loss, dict) and "loss" in loss) or hasattr(loss, "loss")
    seen = (
        f"a {type(loss).__name__} whose loss is None (the model computes it only when given "
        "labels: pass labels=... in the batch)"
        if has_field
        else f"a {type(loss).__name__}"
    )
    raise ConfigurationError(
        f"mp.backward: got {seen}. Pass the scalar loss tensor, or a model output holding it "
        "(.loss, or a dict with 'loss'), e.g. mp.backward(outputs.loss)."
    )


def clip_order(
    optimizers: Sequence[torch.optim.Optimizer], models: Sequence[torch.nn.Module] = ()
) -> list[torch.nn.Parameter]:
    """The optimizers' parameters in the order a hand-written loop clips them.

    ``clip_grad_norm_`` sums the per-parameter norms in the order it is given them, and a
    float sum depends on its order: ``clip_grad_norm_(model.parameters())`` and a clip over the
    optimizer's param groups (weight-decay splits sort them by name) differ in the last bits.
    So the parameters of ``models`` come first, in ``model.parameters()`` order, then any
    other parameter of the optimizers in param-group order; each parameter once.
    """
    wanted = {id(p): p for opt in optimizers for group in opt.param_groups for p in group["params"]}
    ordered: dict[int, torch.nn.Parameter] = {}
    for model in models:
        for param in model.parameters():
            if id(param) in wanted:
                ordered.setdefault(id(param), param)
    for key, param in wanted.items():
        ordered.setdefault(key, param)
    return list(ordered.values())


def _check_grad_accum_steps(value: Any) -> None:
    """The one check of ``grad_accum_steps`` (constructor and assignment)."""
    if not is_int(value, 1):
        raise ConfigurationError(
            f"grad_accum_steps: {value!r} is invalid. It must be an integer >= 1 "
            "(1 steps after every batch)."
        )


def _check_loss(loss: torch.Tensor, name: str, backward_kwargs: dict[str, Any]) -> None:
    """Refuse a loss ``backward()`` cannot use, naming its shape and ``requires_grad``."""
    if loss.numel() != 1 and backward_kwargs.get("gradient") is None:
        raise ConfigurationError(
            f"mp.backward: {name} has shape {tuple(loss.shape)}, not a scalar; backward needs "
            "one number. Reduce it first (loss.mean() or loss.sum()), or pass gradient=..."
        )
    if not loss.requires_grad:
        raise ConfigurationError(
            f"mp.backward: {name} (shape {tuple(loss.shape)}) has requires_grad=False and no "
            "grad_fn, so there is nothing to backpropagate: it was computed under "
            "torch.no_grad()/torch.inference_mode(), from .detach()ed tensors, or from a model "
            "whose parameters all have requires_grad=False. Compute it with gradients enabled."
        )


def _check_optimizers(optimizers: list[Any]) -> None:
    if not optimizers or not all(isinstance(o, torch.optim.Optimizer) for o in optimizers):
        seen = [type(o).__name__ for o in optimizers]
        raise ConfigurationError(
            f"mp.step: expected a torch.optim.Optimizer or a list of them, got {seen or 'none'}."
        )
    if len({id(o) for o in optimizers}) != len(optimizers):
        raise ConfigurationError(
            "mp.step: the same optimizer appears twice in the list; pass each once."
        )


def _check_has_gradients(optimizer: torch.optim.Optimizer, count: int) -> None:
    """Refuse an optimizer none of whose parameters received a gradient in the window: its
    step would change nothing, silently (an optimizer over another model's parameters)."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    if any(p.grad is not None for p in params):
        return
    which = "the optimizer" if count == 1 else f"one of the {count} optimizers"
    raise ConfigurationError(
        f"mp.step: none of the {len(params)} parameters of {which} "
        f"({type(optimizer).__name__}) received a gradient since the last step, so its step "
        "would change nothing. Build the optimizer over the parameters of the model the loss "
        "comes from (torch.optim.AdamW(model.parameters())), and check that they have "
        "requires_grad=True."
    )


@dataclass(frozen=True)
class StepResult:
    """What :meth:`MixedPrecision.step` did.

    Attributes:
        stepped: the optimizer's ``step()`` ran.
        skipped: the window ended but the step was skipped (inf/NaN gradients, fp16 only).
        scale: the loss scale the next backward uses (1.0 without loss scaling).
        micro_step: micro-batches accumulated in this window when ``step`` was called.
        grad_norm: the total unscaled gradient norm before clipping, when clipping is on.
            Read lazily: the GPU is synchronised only if you look at it.
    """

    stepped: bool
    skipped: bool
    scale: float
    micro_step: int
    grad_norm_tensor: torch.Tensor | None = field(default=None, repr=False)

    @property
    def grad_norm(self) -> float | None:
        """The unscaled total gradient norm (before clipping), or None without clipping."""
        norm = self.grad_norm_tensor
        if norm is None:
            return None
        if hasattr(norm, "full_tensor"):  # FSDP2 returns the norm as a DTensor
            norm = norm.full_tensor()
        return float(norm)

    @property
    def window_done(self) -> bool:
        """Whether this call ended an accumulation window (stepped or skipped)."""
        return self.stepped or self.skipped


@check_keywords
class MixedPrecision:
    """Autocast, loss scaling, accumulation and clipping for a hand-written loop.

    Args:
        precision: ``"auto"``, ``"fp32"``, ``"fp16"``, ``"bf16"``, ``"bf16-true"``, ``"fp8"``
            (or an alias), a :class:`~ampkit.Policy` from :func:`~ampkit.resolve_precision`, or a
            precision mode object (:class:`~ampkit.Bf16True`, :class:`~ampkit.Fp8`, ...; it
            holds the mode's options). The engine calls the mode's hooks (:attr:`mode`).
        device: training device; ``None`` picks CUDA when available, else CPU.
        grad_accum_steps: micro-batches per optimizer step; the loss is divided by it.
        max_grad_norm: clip the unscaled gradients to this total norm; None disables clipping.
        scaler: the :class:`~ampkit.LossScaler` fp16 uses, configured as you like (bounds,
            growth, hysteresis, ...); None builds one with the default settings. Only fp16
            scales the loss, so passing one under bf16/fp32 is refused.
        tf32: allow TF32 for fp32 matmuls (CUDA Ampere+); None follows the hardware. Applied
            only inside ``with mp:``, and restored on exit.
        process_group: ranks that must agree on skipping an overflowed step (default: world);
            used for the default scaler (a scaler you pass brings its own).
        **old_options: the per-mode keywords this constructor took before a mode object held
            its options (each mode class lists them in ``options``): they keep working for
            one release with a ``DeprecationWarning`` that shows the mode object to pass
            instead.

    Use it as a context manager (``with MixedPrecision(...) as mp:``) so that global settings
    of the policy (TF32) are applied for the run and restored afterwards. For ``fp8`` and
    ``bf16-true`` call ``model = mp.prepare_model(model)`` and
    ``optimizer = mp.prepare_optimizer(optimizer)`` before the loop (no-ops otherwise).

    Raises:
        ConfigurationError: an argument is out of range or the precision is unknown, or an
            option of one mode given for another precision.
        UnsupportedPrecisionError: the device cannot run the precision.
        TypeError: a keyword this constructor never took.

    Warns:
        DeprecationWarning: an old per-mode keyword.
        PrecisionWarning: as the mode's constructor (bf16-true without compensation, ...).
    """

    def __init__(
        self,
        precision: str | Policy | PrecisionMode = "auto",
        device: torch.device | str | None = None,
        *,
        grad_accum_steps: int = 1,
        max_grad_norm: float | None = None,
        scaler: LossScaler | None = None,
        tf32: bool | None = None,
        process_group: Any = None,
        **old_options: Any,
    ) -> None:
        _check_grad_accum_steps(grad_accum_steps)
        if max_grad_norm is not None and not is_number(max_grad_norm, 0, open_low=True):
            raise ConfigurationError(
                f"max_grad_norm: {max_grad_norm!r} is invalid. Use a positive finite number, or "
                "None to disable clipping."
            )
        if tf32 is not None and not isinstance(tf32, bool):
            raise ConfigurationError(
                f"tf32: {tf32!r} is invalid. Use True, False, or None to follow the hardware."
            )
        from ampkit.precision.modes._deprecated import translate_old_keywords

        options = translate_old_keywords("MixedPrecision", old_options, _KEYWORDS)
        if isinstance(precision, PrecisionMode):
            mode = precision_mode(precision, **options)  # refuses options next to a mode
            if not mode.bound:
                mode.bind(mode.resolve(device, tf32=tf32))
        else:
            policy = (
                precision
                if isinstance(precision, Policy)
                else resolve_precision(precision, device, tf32=tf32)
            )
            mode = precision_mode(policy, **options)
        #: The precision mode: every precision-specific step of the engine is one of its hooks.
        self.mode: PrecisionMode = mode
        self.policy: Policy = mode.policy
        self._micro_step = 0
        self._grad_accum_steps: int = grad_accum_steps
        self.max_grad_norm = max_grad_norm
        self.scaler = self._check_scaler(scaler, process_group)
        self._stepped_since_backward: tuple[int, ...] = ()
        self._session: contextlib.ExitStack | None = None
        self._checked_optimizers: set[int] = set()
        #: Models seen by prepare_model/accumulate: clipping takes their parameter order.
        self._clip_models: list[weakref.ref[torch.nn.Module]] = []
        #: What the run really trains in (:meth:`check_contract`), from the first step on.
        self.contract: DtypeContract | None = None

    def _check_scaler(self, scaler: LossScaler | None, process_group: Any) -> LossScaler:
        if scaler is None:
            return LossScaler(enabled=self.policy.uses_scaler, process_group=process_group)
        if not isinstance(scaler, LossScaler):
            raise ConfigurationError(
                f"scaler: got {type(scaler).__name__}; pass an ampkit.LossScaler (or None for "
                "the default one)."
            )
        if not self.policy.uses_scaler:
            raise ConfigurationError(
                f"scaler: a LossScaler was passed but the precision is {self.policy.precision} "
                f"({self.policy.reason}), which needs no loss scaling. Only fp16 scales the "
                "loss: drop scaler=, or train in fp16."
            )
        if not scaler.is_enabled():
            raise ConfigurationError(
                "scaler: the LossScaler passed has enabled=False, but fp16 needs loss scaling "
                "(small gradients underflow without it). Pass an enabled scaler, or None."
            )
        return scaler

    def prepare_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """Make ``model`` ready for the precision, in place; return it (the mode's hook).

        ``fp8``: convert the Linear layers of the mode's plan to torchao's Float8Linear
        (without a plan: the layers that pass the shape rules and torchao's size prior).
        ``bf16-true``: cast parameters and buffers to bf16, keeping the mode's ``keep_fp32``
        (default: embeddings, norms, the final projection) in fp32. Others: unchanged.
        Call it once, on the model on its device, before DDP/FSDP and ``torch.compile``.

        Raises:
            ConfigurationError: the plan names layers that are not Linears of ``model``.
            MissingDependencyError: fp8 without torchao.
        """
        self._remember_model(model)
        return self.mode.prepare_model(model)

    def _remember_model(self, model: torch.nn.Module) -> None:
        """Note ``model`` for the order of clipping's norm (see :meth:`step`)."""
        if isinstance(model, torch.nn.Module) and all(r() is not model for r in self._clip_models):
            self._clip_models = [r for r in self._clip_models if r() is not None]
            self._clip_models.append(weakref.ref(model))

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer to train with (the mode's hook): bf16-true wraps ``optimizer`` in a
        :class:`~ampkit.precision.bf16_true.CompensatedOptimizer`; others return it unchanged.

        Raises:
            ConfigurationError: ``optimizer`` is not a ``torch.optim.Optimizer``.
        """
        return self.mode.prepare_optimizer(optimizer)

    # -- session -------------------------------------------------------------------------

    def __enter__(self) -> MixedPrecision:
        if self._session is not None:
            raise ScalerStateError("MixedPrecision: this session is already open (nested `with`).")
        stack = contextlib.ExitStack()
        stack.enter_context(precision_session(self.policy))
        self._session = stack
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Restore the global torch settings changed by ``with mp:`` (idempotent)."""
        if self._session is not None:
            session, self._session = self._session, None
            session.close()

    # -- the loop ------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        """The device of the policy."""
        return self.policy.device

    @property
    def stats(self) -> ScalerStats:
        """Loss-scale telemetry (steps, skipped steps, scale, history); never syncs the GPU."""
        return self.scaler.stats

    @property
    def grad_accum_steps(self) -> int:
        """Micro-batches per optimizer step. Assigning it is checked as the constructor checks
        the argument, and only allowed between windows (right after a step)."""
        return self._grad_accum_steps

    @grad_accum_steps.setter
    def grad_accum_steps(self, value: int) -> None:
        _check_grad_accum_steps(value)
        if self._micro_step and value != self._grad_accum_steps:
            raise ScalerStateError(
                f"grad_accum_steps: cannot change from {self._grad_accum_steps} to {value} in "
                f"the middle of an accumulation window ({self._micro_step} micro-batches "
                "done); change it right after mp.step() ended a window."
            )
        self._grad_accum_steps = value

    @property
    def micro_step(self) -> int:
        """Micro-batches accumulated since the last optimizer step (0 right after a step)."""
        return self._micro_step

    @property
    def is_final_micro_batch(self) -> bool:
        """Whether the next ``backward`` completes an accumulation window."""
        return self._micro_step == self.grad_accum_steps - 1

    def autocast(self) -> Any:
        """The mode's autocast region (the policy's; an explicit fp32 region for fp32)."""
        return self.mode.autocast()

    @contextlib.contextmanager
    def accumulate(self, model: torch.nn.Module) -> Iterator[None]:
        """Skip gradient all-reduce on non-final micro-batches of an accumulation window.

        Wrap the forward and ``backward`` of each micro-batch. For a DDP model this enters
        ``model.no_sync()`` unless the micro-batch is the last of the window; for an FSDP2
        (``fully_shard``) model it switches ``set_requires_gradient_sync``. For other models it
        does nothing, so the same loop runs on one process and under ``torchrun``.

        Pass each micro-batch's plain loss to :meth:`backward`, not ``loss /
        grad_accum_steps``: ``backward`` divides by the accumulation itself, so dividing
        first divides twice (gradients ``grad_accum_steps`` times too small, silently).
        """
        self._remember_model(model)
        if self.is_final_micro_batch:
            yield
            return
        no_sync = getattr(model, "no_sync", None)
        set_sync = getattr(model, "set_requires_gradient_sync", None)
        if callable(no_sync):
            with no_sync():
                yield
        elif callable(set_sync):
            set_sync(False)
            try:
                yield
            finally:
                set_sync(True)
        else:
            yield

    def backward(self, loss: Any, **backward_kwargs: Any) -> None:
        """Run backward on ``loss / grad_accum_steps``, multiplied by the loss scale for fp16.

        The division by the accumulation is done here: pass the micro-batch's plain loss (the
        mean the model or the loss function returns). The usual ``loss = loss / grad_accum``
        of a hand-written accumulation loop must go, or the loss is divided twice and the
        gradients are ``grad_accum_steps`` times too small, with no error and no inf/NaN to
        show for it. No warning is given: a loss divided by ``grad_accum_steps`` cannot be
        told from a correct one (a sum over a batch of that many items divided by the batch
        size).

        ``loss`` is the scalar loss tensor, or a model output holding it (an object with
        ``.loss`` such as a Hugging Face ``ModelOutput``, or a dict with ``"loss"``), or a list
        of them: several losses of one micro-batch (PyTorch's AMP example with two models and
        two losses). Each is scaled and backpropagated in order, as separate ``backward()``
        calls; all but the last keep the graph (``retain_graph=True``) unless
        ``retain_graph`` is given.

        Raises:
            ConfigurationError: ``loss`` holds no loss tensor (see :func:`loss_tensor`), or a
                loss is not a scalar or does not require grad (the message names its shape
                and ``requires_grad``).
            ScalerStateError: more backward calls than ``grad_accum_steps`` without a ``step``.
        """
        many = isinstance(loss, (list, tuple))
        losses = [loss_tensor(item) for item in loss] if many else [loss_tensor(loss)]
        if not losses:
            raise ConfigurationError("mp.backward: got an empty list of losses; pass at least one.")
        for index, tensor in enumerate(losses):
            _check_loss(tensor, f"loss {index}" if many else "the loss", backward_kwargs)
        if self._micro_step >= self.grad_accum_steps:
            raise ScalerStateError(
                f"backward() was called {self._micro_step + 1} times without step(), but "
                f"grad_accum_steps={self.grad_accum_steps}. Call mp.step(optimizer) after each "
                "micro-batch; it steps on the last micro-batch of every window. Several losses "
                "of one micro-batch go in one call: mp.backward([loss0, loss1])."
            )
        for index, tensor in enumerate(losses):
            kwargs = dict(backward_kwargs)
            if index < len(losses) - 1:
                kwargs.setdefault("retain_graph", True)
            if self.grad_accum_steps > 1:
                tensor = tensor / self.grad_accum_steps
            self.scaler.scale(tensor).backward(**kwargs)
        self._micro_step += 1
        self._stepped_since_backward = ()

    def step(
        self,
        optimizer: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
        scheduler: LRScheduler | Sequence[LRScheduler] | None = None,
    ) -> StepResult:
        """End the micro-batch; on the last one of the window, update the weights.

        In order: unscale the gradients, clip them to ``max_grad_norm`` over the optimizer's
        parameters (in the parameter order of the model given to :meth:`prepare_model` or
        :meth:`accumulate`, so the norm is bitwise ``clip_grad_norm_(model.parameters())``
        whatever the param groups: :func:`clip_order`), call ``optimizer.step()`` unless a
        gradient is inf/NaN, update the loss
        scale, step ``scheduler`` only if the optimizer stepped, and
        ``optimizer.zero_grad(set_to_none=True)``. One GPU sync for fp16 (the skip decision).

        Several optimizers (two models, PyTorch's AMP example) step together: pass them in
        one call, ``mp.step([opt0, opt1])`` (and their schedulers as a list). Each is stepped
        once; one decision to skip holds for all (an inf/NaN in any gradient of any of them,
        on any rank, skips every one); clipping is over all their parameters together (one
        norm); the scale is updated once per window. A second ``step`` with another optimizer
        right after a ``step`` is refused: the first one has already decided for its own.

        The first call with an optimizer checks its parameters' dtypes
        (:func:`validate_param_dtypes`).

        Raises:
            ScalerStateError: ``step`` without a ``backward`` since the last step.
            ConfigurationError: fp16/bf16 parameters the precision does not expect, or an
                optimizer none of whose parameters received a gradient in the window (it is
                over another model's parameters, or all of them are frozen).
        """
        optimizers = (
            list(optimizer)
            if isinstance(optimizer, (list, tuple))
            else cast(list[torch.optim.Optimizer], [optimizer])
        )
        _check_optimizers(optimizers)
        for opt in optimizers:
            if id(opt) not in self._checked_optimizers:
                self.check_contract(opt)  # validate_param_dtypes, then the contract
                self._checked_optimizers.add(id(opt))
        ids = tuple(id(opt) for opt in optimizers)
        if self._stepped_since_backward and ids != self._stepped_since_backward:
            raise ScalerStateError(
                "step() was called again, with another optimizer, right after step() and with "
                "no backward() between; the first step already decided for its optimizer "
                "alone. Optimizers of one iteration step together, with one skip decision: "
                "pass them in one call, mp.step([optimizer0, optimizer1])."
            )
        if self._micro_step == 0 or self._stepped_since_backward:
            raise ScalerStateError(
                "step() was called with no backward() since the last step. Call "
                "mp.backward(loss) for every micro-batch, then mp.step(optimizer)."
            )
        if self._micro_step < self.grad_accum_steps:
            self._stepped_since_backward = ids
            return StepResult(
                stepped=False,
                skipped=False,
                scale=self.scaler.get_scale(),
                micro_step=self._micro_step,
            )
        for opt in optimizers:  # before anything changes: a refused step can be retried
            _check_has_gradients(opt, len(optimizers))
        self._stepped_since_backward = ids
        micro = self._micro_step
        self._micro_step = 0
        for opt in optimizers:
            self.mode.before_optimizer_step(opt)
            self.scaler.unscale_(opt)
        norm = None
        if self.max_grad_norm is not None:
            models = [m for m in (r() for r in self._clip_models) if m is not None]
            params = clip_order(optimizers, models)
            norm = torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        stepped = self.scaler.step_all(optimizers)
        self.scaler.update()
        for opt in optimizers:
            self.mode.after_optimizer_step(opt, stepped)
        schedulers = (
            list(scheduler)
            if isinstance(scheduler, (list, tuple))
            else cast(list[Any], [scheduler])
        )
        if stepped:
            for sched in schedulers:
                if sched is not None:
                    sched.step()
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        return StepResult(
            stepped=stepped,
            skipped=not stepped,
            scale=self.scaler.get_scale(),
            micro_step=micro,
            grad_norm_tensor=norm,
        )

    def check_contract(
        self, optimizer: torch.optim.Optimizer, model: torch.nn.Module | None = None
    ) -> DtypeContract:
        """Read what ``optimizer`` trains in under this engine's autocast, keep it in
        :attr:`contract` and return it (:func:`~ampkit.precision.contract.check_dtype_contract`).
        The first :meth:`step` with an optimizer calls it; the Trainer calls it at set-up.

        Raises:
            ConfigurationError: fp16/bf16 parameters the precision does not expect
                (:func:`validate_param_dtypes`).

        Warns:
            PrecisionWarning: bf16 weights nothing compensates (bf16-true without
                :meth:`prepare_optimizer`), once per optimizer.
        """
        validate_param_dtypes(optimizer, self.policy)
        compute = self.policy.compute_dtype
        self.contract = check_dtype_contract(
            optimizer,
            model=model,
            autocast=None if compute == torch.float32 else compute,
            caller=f"MixedPrecision({self.policy.precision!r})",
        )
        return self.contract

    # -- checkpointing ---------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Precision, loss-scaler state and the position inside the accumulation window
        (and the mode's state, under ``"mode"``, for a mode that keeps one)."""
        state: dict[str, Any] = {
            "precision": self.policy.precision,
            "grad_accum_steps": self.grad_accum_steps,
            "micro_step": self._micro_step,
            "scaler": self.scaler.state_dict(),
        }
        mode_state = self.mode.state_dict()
        if mode_state:
            state["mode"] = mode_state
        return state

    def load_state_dict(
        self, state: dict[str, Any], *, allow_precision_change: bool = False
    ) -> str | None:
        """Restore from :meth:`state_dict`; nothing changes unless all of it is valid.

        With ``allow_precision_change``, a state saved under another precision is accepted on
        purpose (fp16 -> bf16 after a divergence): the accumulation position is restored and
        the saved loss-scaler state is dropped (this engine keeps its own, fresh one).

        Returns:
            The saved precision when it differs from this engine's (only possible with
            ``allow_precision_change``), else None.

        Raises:
            CheckpointError: the state is not such a dict (keys missing), was saved under
                another accumulation, or another precision without ``allow_precision_change``,
                or its ``micro_step`` is not an integer in ``[0, grad_accum_steps]``.
            ScalerStateError: the loss-scaler state is out of range (see
                :meth:`LossScaler.load_state_dict`).
        """
        keys = ("precision", "grad_accum_steps", "micro_step", "scaler")
        if not isinstance(state, dict) or any(key not in state for key in keys):
            seen = sorted(state) if isinstance(state, dict) else type(state).__name__
            raise CheckpointError(
                f"MixedPrecision.load_state_dict: expected a dict with the keys {list(keys)}, "
                f"got {seen}. Pass what MixedPrecision.state_dict() returned."
            )
        micro = state["micro_step"]
        if not is_int(micro, 0, self.grad_accum_steps):
            raise CheckpointError(
                f"MixedPrecision.load_state_dict: micro_step={micro!r} is invalid; it must be an "
                f"integer in [0, grad_accum_steps={self.grad_accum_steps}]. The state is damaged."
            )
        if state["grad_accum_steps"] != self.grad_accum_steps:
            raise CheckpointError(
                "MixedPrecision.load_state_dict: the state has grad_accum_steps="
                f"{state['grad_accum_steps']!r} but this engine has grad_accum_steps="
                f"{self.grad_accum_steps!r}. Resume with the settings of the saved run."
            )
        saved = state["precision"]
        if saved != self.policy.precision:
            if not allow_precision_change:
                raise CheckpointError(
                    f"MixedPrecision.load_state_dict: the state has precision={saved!r} but "
                    f"this engine has precision={self.policy.precision!r}. Resume with the "
                    "settings of the saved run, or switch on purpose with "
                    "CheckpointConfig(allow_precision_change=True) (--allow-precision-change): "
                    "weights and optimizer carry over, the loss-scaler state is dropped."
                )
            self._micro_step = micro
            return str(saved)
        self.scaler.load_state_dict(state["scaler"])
        self.mode.load_state_dict(state.get("mode") or {})
        self._micro_step = micro
        return None
