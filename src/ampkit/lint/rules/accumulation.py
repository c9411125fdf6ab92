"""AMP011: gradient accumulation whose loss is not divided by the number of micro-steps."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

from ampkit.lint.analysis import FileAnalysis, Unit
from ampkit.lint.events import Event, exclusive, names_read, reset_counter
from ampkit.lint.facts import FileFacts
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.names import dotted_key
from ampkit.lint.project import loss_reductions
from ampkit.lint.rules.base import Rule, register
from ampkit.lint.scopes import parameter_names

__all__ = ["UndividedAccumulatedLoss"]

_DEPTH = 4


def _has_division(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, (ast.BinOp, ast.AugAssign)) and isinstance(sub.op, (ast.Div, ast.Mult)):
            if not _weighting(sub):
                return True
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr in ("div", "div_", "mul", "mul_", "true_divide")
        ):
            return True
    return False


#: words of a factor that weighs one loss term against another (``lambda_param``,
#: ``loss_weight``, ``alpha``, ``temperature ** 2``), not the loss against the accumulation
_WEIGHT = re.compile(r"lambda|weight|coef|alpha|beta|temperature|ratio", re.I)


def _weighting(node: ast.BinOp | ast.AugAssign) -> bool:
    """A product that weighs terms of a loss: ``loss_dict[k] * weight_dict[k]`` (each term
    by its entry of a table, the DETR-style weighted sum) or a factor named for a weight
    (``(1 - args.lambda_param) * target_loss``)."""
    if not isinstance(node, ast.BinOp) or not isinstance(node.op, ast.Mult):
        return False
    left, right = node.left, node.right
    if (
        isinstance(left, ast.Subscript)
        and isinstance(right, ast.Subscript)
        and ast.dump(left.slice) == ast.dump(right.slice)
    ):
        return True
    return any(
        not any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Div) for n in ast.walk(side))
        and any(_WEIGHT.search(_word(n)) for n in ast.walk(side))
        for side in (left, right)
    )


def _word(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _carried(value: ast.expr) -> list[str]:
    """Variables whose value a binding passes on unchanged: ``loss = other`` and the loss
    handed to a wrapper (``with amp.scale_loss(loss, opt) as scaled``, first argument), also
    negated (``loss = -objective``)."""
    if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
        return _carried(value.operand)
    if isinstance(value, (ast.Name, ast.Attribute)):
        key = dotted_key(value)
        return [key] if key is not None else []
    if isinstance(value, ast.Call) and value.args:
        key = dotted_key(value.args[0])
        return [key] if key is not None else []
    return []


class _Provenance:
    """Where a loss value comes from, followed through the file's bindings."""

    def __init__(self, analysis: FileAnalysis, divisor: str) -> None:
        self.analysis = analysis
        self.facts = analysis.facts
        self.tainted = self._reach(divisor)
        #: the counters a guard compares with ``divisor`` and restarts (``if count >= n:
        #: ...; count = 0``): a loss divided by one is divided by 1, 2, ..., n in turn
        self.counters = {
            counted[0]
            for node in analysis.nodes
            if isinstance(node, ast.If)
            and (counted := reset_counter(node)) is not None
            and counted[1] == divisor
        }
        self.by_counter: str | None = None

    def _reach(self, divisor: str) -> set[str]:
        """Names that hold the accumulation count or a value computed from it, including the
        parameters of same-file functions it is passed to."""
        tainted = {divisor}
        params = self._parameters()
        for _ in range(_DEPTH):
            before = len(tainted)
            for key, values in self.facts.assignments.items():
                if key not in tainted and any(_carries(v, tainted) for v in values):
                    tainted.add(key)
            for call, fn in params:
                positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
                if positional and positional[0] in ("self", "cls"):
                    positional = positional[1:]
                for name, arg in zip(positional, call.args, strict=False):
                    if _carries(arg, tainted):
                        tainted.add(name)
                for kw in call.keywords:
                    if kw.arg is not None and _carries(kw.value, tainted):
                        tainted.add(kw.arg)
            if len(tainted) == before:
                break
        return tainted

    def _parameters(self) -> list[tuple[ast.Call, ast.FunctionDef | ast.AsyncFunctionDef]]:
        by_name: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for node in self.analysis.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                by_name.setdefault(node.name, node)
        pairs = []
        for node in self.analysis.nodes:
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in by_name:
                    pairs.append((node, by_name[name]))
        return pairs

    def normalised(self, loss: ast.expr | None, at: ast.AST | None = None) -> bool:
        """Whether the loss (or what it was computed from) is divided or scaled somewhere,
        or computed by a call that receives the accumulation count. A binding of the loss
        itself written after the backward ``at``, in its function, does not count: it divides
        a value the backward has already used (``loss = loss / n`` for the log)."""
        if loss is None or _has_division(loss):
            return True
        seen: set[str] = set()
        first = dotted_key(loss) or ast.unparse(loss)
        todo = [k for k in [first] if k]
        for _ in range(_DEPTH):
            following: list[str] = []
            for key in todo:
                if key in seen:
                    continue
                seen.add(key)
                values = self.facts.assignments.get(key, [])
                if not values and "." in key and not key.startswith("self."):
                    # ``losses.loss_total.backward()`` after ``losses = compute(...) / n``:
                    # a field of an object that was divided as a whole (``__truediv__``)
                    values = [
                        v
                        for v in self.facts.assignments.get(key.rsplit(".", 1)[0], [])
                        if isinstance(v, ast.BinOp) and isinstance(v.op, ast.Div)
                    ]
                for value in values:
                    if key == first and self._after(value, at):
                        continue
                    if self._elsewhere(key, value, at):
                        continue
                    if self._divides(value):
                        return True
                    following.extend(_carried(value))
            todo = following
        return False

    def _after(self, value: ast.expr, at: ast.AST | None) -> bool:
        """Whether ``value`` is bound after ``at`` in the same function (a loop body runs
        in order: the loss is computed again before the next backward)."""
        if at is None or self.facts.owner_of(value) is not self.facts.owner_of(at):
            return False
        return (value.lineno, value.col_offset) > (at.lineno, at.col_offset)  # type: ignore[attr-defined]

    def _elsewhere(self, key: str, value: ast.expr, at: ast.AST | None) -> bool:
        """Whether ``value`` binds a local name of another function than the backward's
        (``loss = self._loss_and_backward(batch) / n`` in the caller of a helper whose own
        ``loss`` it backwards): it cannot reach that backward. A parameter of the backward's
        function, or a name it does not bind itself, is read from outside and still counts."""
        if at is None or "." in key:
            return False
        home = self.facts.owner_of(at)
        if home is None or self.facts.owner_of(value) is home:
            return False
        if key in parameter_names(home):
            return False
        return any(self.facts.owner_of(v) is home for v in self.facts.assignments.get(key, []))

    def _divides(self, value: ast.expr) -> bool:
        counter = self._by_counter(value)
        if counter is not None:
            self.by_counter = counter
            return False
        if _has_division(value):
            return True
        if not isinstance(value, ast.Call):
            return False
        args = [*value.args, *(kw.value for kw in value.keywords)]
        if any(_carries(a, self.tainted) for a in args):
            return True
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        callee = self.facts.functions.get(name) or _method(self.analysis, name)
        return callee is not None and _has_division(callee)

    def _by_counter(self, value: ast.AST) -> str | None:
        """The running counter ``value`` divides by (``loss / count``, ``loss /= count``)."""
        if not self.counters:
            return None
        if isinstance(value, ast.AugAssign) and isinstance(value.op, ast.Div):
            divisor: ast.expr | None = value.value
        elif isinstance(value, ast.BinOp) and isinstance(value.op, ast.Div):
            divisor = value.right
        else:
            return None
        key = dotted_key(divisor) if divisor is not None else None
        return key if key in self.counters else None


def _carries(node: ast.AST, keys: set[str]) -> bool:
    """Whether ``node``'s value is computed from one of ``keys``; a comparison of it (the
    ``is_step = (i + 1) % n == 0`` flag, the test of ``a if c else b``) yields no such value."""
    if isinstance(node, ast.Compare):
        return False
    if isinstance(node, ast.IfExp):
        return _carries(node.body, keys) or _carries(node.orelse, keys)
    if isinstance(node, (ast.Name, ast.Attribute)) and dotted_key(node) in keys:
        return True
    return any(_carries(child, keys) for child in ast.iter_child_nodes(node))


def _method(analysis: FileAnalysis, name: str) -> ast.AST | None:
    for node in analysis.nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _sum_reduced(analysis: FileAnalysis) -> bool:
    """Whether every torch loss the file and the tree's modules it imports compute is
    sum-reduced (``reduction="sum"``, written or the default of the parameter passed on):
    the gradients of ``n`` summed micro-batch losses are those of one summed big batch, so
    there is nothing to divide by ``n`` (the loss is normalised by its count elsewhere)."""
    calls = analysis.facts.of_type(ast.Call)
    own = loss_reductions(analysis.tree, calls)  # type: ignore[arg-type]
    found = own if analysis.project is None else analysis.project.loss_reductions(own)
    return found == {"sum"}


def _root(node: ast.expr) -> str | None:
    """The variable a chain of calls and attributes starts from (``loss.detach().item()``)."""
    while True:
        if isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Attribute):
            node = node.value
        else:
            break
    return node.id if isinstance(node, ast.Name) else None


def _key(node: ast.expr) -> object:
    """The constant key of ``d["loss"]`` (``None`` for any other expression)."""
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return node.slice.value
    return None


def _count_normalised(analysis: FileAnalysis, loss: str) -> bool:
    """Whether the file records the value of ``loss`` under a key (``info["loss"] =
    loss.item()``) beside an element count summed from a tensor (``info["frames"] =
    lens.sum().item()``) and reports the one divided by the other: a loss summed over its
    elements, normalised by their count when reported, not by the micro-batch count."""
    losses: set[object] = set()
    counts: set[object] = set()
    for node in analysis.nodes:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            key = _key(node.targets[0])
        elif isinstance(node, ast.AugAssign):
            key = _key(node.target)
        else:
            continue
        if key is None:
            continue
        if _root(node.value) == loss:
            losses.add(key)
        elif any(
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "sum"
            for sub in ast.walk(node.value)
        ):
            counts.add(key)
    if not losses or not counts:
        return False
    return any(
        isinstance(node, ast.BinOp)
        and isinstance(node.op, ast.Div)
        and _key(node.left) in losses
        and _key(node.right) in counts - losses
        for node in analysis.nodes
    )


#: frameworks whose backward does not divide the loss by an accumulation count (Fabric's
#: ``fabric.backward``, Lightning's ``self.manual_backward`` in manual optimisation)
_NOT_DIVIDING = frozenset({"fabric", "lightning"})


def _per_call_step(
    analysis: FileAnalysis, unit: Unit, steps: list[Event], b: Event
) -> Event | None:
    """A method that runs once per batch (no loop of its own): the step after ``b`` taken
    every N calls, counted by an attribute of the object that the method itself advances
    (``self.count += 1``, ``self.count = (self.count + 1) % n``) or by a parameter
    (``if (batch_idx + 1) % n == 0:``)."""
    fn = unit.node
    if unit.cls is None or not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    after = [s for s in steps if s.order > b.order and not s.loops and not exclusive(s, b)]
    if not after or after[0].ctx.accum is None:
        return None
    # what advances from call to call: an attribute the method advances, or a parameter
    # its caller does (``training_step(self, batch, batch_idx)``)
    advanced = _advanced_attributes(fn) | {a.arg for a in fn.args.args[1:]}
    return after[0] if _counted_by(analysis.facts, unit, fn, after[0], advanced) else None


def _counted_by(facts: FileFacts, unit: Unit, fn: ast.AST, step: Event, advanced: set[str]) -> bool:
    """Whether ``step``'s every-N guard, or an early return of ``fn``, reads one of the
    names that advance from call to call."""
    names = {n for key, _ in step.ctx.arms for n in unit.test_names.get(key, ())}
    # a flag tested by the guard reads what its bindings read (``should_update = (batch_idx
    # + 1) % n == 0`` then ``if should_update:``)
    names |= {n for name in names for v in facts.assignments.get(name, ()) for n in names_read(v)}
    return bool(names & advanced) or _guard_reads(fn, advanced)


def _closure_step(step: Event) -> bool:
    """``optimizer.step(closure=...)``: the step runs the closure's own forward and backward,
    so what came before it is not what it applies (LBFGS, Lightning's closures)."""
    call = step.node
    if not isinstance(call, ast.Call):
        return False
    args = call.args[1:] if step.kind == "scaler_step" else call.args
    return bool(args) or any(kw.arg == "closure" for kw in call.keywords)


_MICRO_BATCHES = "the loop's micro-batches"
#: names of what a micro-batch loop iterates (``range(accum_steps)``, ``batch.chunk(n)``)
_MICRO = re.compile(r"accum|micro|chunk|split|grad_acc", re.I)


def _micro_batch_loop(analysis: FileAnalysis, unit: Unit, steps: list[Event], b: Event) -> bool:
    """Whether ``b`` runs in a loop over micro-batches with no step inside it and a step
    after it: ``while True: batch = next(loader); loss.backward(); if seen >= total: break``
    then ``optimizer.step()``, ``for micro in batch.chunk(n): ...``, ``for _ in
    range(accum_steps): ...``: the gradients of every pass add up for the one step."""
    loop = b.loops[-1]
    if any(loop in s.loops for s in steps):
        return False
    outer = b.loops[:-1]
    if not any(s.order > b.order and s.loops == outer and not exclusive(s, b) for s in steps):
        return False
    loops = analysis.of_type(ast.For, ast.AsyncFor, ast.While)
    node = next((n for n in loops if id(n) == loop), None)  # (None: written in another file)
    if not isinstance(node, (ast.For, ast.AsyncFor, ast.While)):
        return False
    if isinstance(node, (ast.For, ast.AsyncFor)):
        header = ast.unparse(node.iter) + " " + ast.unparse(node.target)
        if _MICRO.search(header):
            return True
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "next"
        for n in ast.walk(node)
    )


def _sibling_step(analysis: FileAnalysis, unit: Unit) -> Event | None:
    """A backward in a method with no step (``def backward(self, loss)``) whose class steps
    in another method every N calls (``update_params`` returning early until its counter
    comes round): that step takes the backward's gradients."""
    for other in analysis.units:
        if other is unit or other.group != unit.group or other.of("backward"):
            continue
        fn = other.node
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        advanced = _advanced_attributes(fn)
        for s in other.of("scaler_step", "opt_step"):
            if (
                not s.loops
                and s.ctx.accum is not None
                and _counted_by(analysis.facts, other, fn, s, advanced)
            ):
                return s
    return None


def _advanced_attributes(fn: ast.AST) -> set[str]:
    """``self.x`` attributes a function advances: ``self.x += 1`` or ``self.x = (self.x +
    1) % n``."""
    found: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add):
            key = dotted_key(node.target)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            key = dotted_key(node.targets[0])
            if key is None or key not in {dotted_key(n) for n in ast.walk(node.value)}:
                continue
        else:
            continue
        if key is not None and key.startswith("self."):
            found.add(key)
    return found


def _guard_reads(fn: ast.AST, advanced: set[str]) -> bool:
    """Whether an early return of ``fn`` tests one of ``advanced``."""
    for node in ast.walk(fn):
        if isinstance(node, ast.If) and node.body and isinstance(node.body[-1], ast.Return):
            if {dotted_key(n) for n in ast.walk(node.test)} & advanced:
                return True
    return False


@register
class UndividedAccumulatedLoss(Rule):
    """Gradient accumulation where the loss is not divided by the number of micro-steps.

    Gradients of ``n`` backward passes add up. Without ``loss / n`` the effective learning
    rate is ``n`` times larger than with one big batch, and with fp16 the summed, scaled
    gradients overflow ``n`` times sooner (more skipped steps).

    Normalising elsewhere counts: dividing the loss before handing it on
    (``loss = loss / n`` then ``amp.scale_loss(loss, ...)``), dividing a loss object as a
    whole (``losses = compute_loss(batch) / n`` then ``losses.loss_total.backward()``),
    computing it with a function that receives the accumulation count, or rescaling the
    gradients before the step (``p.grad.div_(n)``, ``optimizer.multiply_grads(1 / n)``, also
    after a micro-batch loop). A division written after the
    backward in the same function (``loss = loss / n`` for the log) comes too late: the
    backward has used the undivided loss. A backward whose gradients
    the next step in the same iteration consumes unconditionally is not accumulated, even
    when another optimizer is stepped every ``n`` iterations (the delayed actor update of
    TD3-style reinforcement learning).

    A product that weighs the terms of a loss is no division: ``loss_dict[k] *
    weight_dict[k]`` summed over a loss dict, or a factor named for a weight
    (``(1 - args.lambda_param) * ce + args.lambda_param * kd``). A loss divided in the
    caller of a helper that runs its backward (``loss = self._loss_and_backward(batch) /
    n``) is divided after the backward has used it.

    A sum-reduced loss needs no division: ``n`` summed micro-batch losses have the gradients
    of one summed big batch. It is recognised when every torch loss the file (and, in a
    project, the tree's modules it imports, two imports deep) computes passes
    ``reduction="sum"`` (written, or as the default of the parameter it passes on), or when
    the file records the loss's value beside an element count summed from a tensor and
    reports the one divided by the other (``info["loss"] = loss.item()``,
    ``info["frames"] = lens.sum().item()``, ``tot["loss"] / tot["frames"]``).

    A trainer method called once per batch accumulates too when it steps every ``n`` calls
    by a parameter its caller advances (``if (batch_idx + 1) % n == 0:``, also through a
    flag: ``should_update = (batch_idx + 1) % n == 0`` then ``if should_update:``, or
    ``update = (i == last) or ((i + 1) % n == 0)`` then ``if update is True:``), or
    by an attribute it advances (``self.count += 1`` then ``if self.count % n == 0:``, or
    ``self.count = (self.count + 1) % n`` then ``if self.count != 0: return``, also nested
    under ``if n > 1:``), and so does a class whose ``backward(self, loss)`` method has no
    step while another method of it steps that way.

    A counter that restarts steps every ``n`` iterations too: ``count += 1`` ... ``if count
    >= n: optimizer.step(); ...; count = 0`` (also ``or`` the epoch's last batch). A loss
    divided by that counter is divided by 1, 2, ..., ``n`` in turn, not by ``n``, and is
    reported. An object whose ``step()`` and ``zero_grad()`` are both called is an optimizer
    whatever its name (an optimizer wrapped with its schedule, ``scheduler.step()``).

    A loop over micro-batches with the step after it accumulates over its passes: ``while
    True: batch = next(loader); loss.backward(); ...; break`` (also inlined from a method the
    stepping one calls), ``for micro in batch.chunk(n)``, ``for _ in range(accum_steps)``. A
    loop over anything else (the tasks of a multi-task loss) is not taken for one.

    Fabric's ``fabric.backward`` and Lightning's ``self.manual_backward`` do not divide the
    loss, so they count like ``loss.backward()``; Accelerate's ``accelerator.backward`` and
    a DeepSpeed engine's ``backward`` divide by their own accumulation count and do not.
    A helper class with no backward of its own that steps every ``n`` calls and hands back
    ``self.scaler.scale(loss)`` for its callers' backward is reported where it scales the
    undivided loss (unless a call in the file passes a quotient).
    ``loss.backward(loss / n)`` is not divided either: the quotient is the upstream
    gradient, so the gradients are multiplied by the loss's value; a constant gradient
    (``torch.ones_like(loss) / n``) divides them.

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
        provenance: dict[str, _Provenance] = {}
        yield from self._scaling_helpers(analysis)
        if not any(unit.of("backward") for unit in analysis.units) or _sum_reduced(analysis):
            return
        for unit in analysis.units:
            for b in unit.of("backward"):
                if b.ctx.accum or (b.framework and b.extra.get("framework") not in _NOT_DIVIDING):
                    continue  # (Accelerate and DeepSpeed divide by their accumulation count)
                steps = unit.related(b, "scaler_step", "opt_step")
                divisor: str | None = None
                if b.loops:
                    step = self._accumulating_step(steps, b)
                    if step is None and _micro_batch_loop(analysis, unit, steps, b):
                        divisor = _MICRO_BATCHES
                else:
                    step = _per_call_step(analysis, unit, steps, b)
                    if step is None and not steps and unit.cls is not None:
                        step = _sibling_step(analysis, unit)
                if divisor is None:
                    if step is None or step.ctx.accum is None or _closure_step(step):
                        continue
                    divisor = step.ctx.accum
                if any(
                    (
                        not b.loops
                        or b.loops[-1] in r.loops
                        # after the micro-batch loop, before its step: ``p.grad.div_(n)``
                        or (divisor == _MICRO_BATCHES and r.order > b.order
                            and r.loops[: len(b.loops) - 1] == b.loops[:-1])
                    )
                    and not exclusive(r, b)
                    for r in unit.of("grad_rescale")
                    if r in unit.related(b, "grad_rescale") or divisor == _MICRO_BATCHES
                ):  # fmt: skip
                    continue
                if divisor not in provenance:
                    provenance[divisor] = _Provenance(analysis, divisor)
                provenance[divisor].by_counter = None
                if provenance[divisor].normalised(b.loss, b.node):
                    continue
                loss = dotted_key(b.loss) if b.loss is not None else None
                if loss is not None and _count_normalised(analysis, loss):
                    continue
                counter = provenance[divisor].by_counter
                if counter is not None:
                    message = (
                        f"gradients are accumulated over {divisor} iterations but the loss is "
                        f"divided by {counter}, the running count (1, 2, ..., {divisor} in "
                        f"turn), not by {divisor}"
                    )
                elif divisor == _MICRO_BATCHES:
                    message = (
                        "the gradients of every micro-batch of this loop add up for the one "
                        "step after it, but the loss is not divided by the number of "
                        "micro-batches"
                    )
                else:
                    message = (
                        f"gradients are accumulated over {divisor} iterations but the loss is "
                        f"not divided by {divisor}"
                    )
                gradient = b.extra.get("gradient")
                if isinstance(gradient, ast.expr) and _has_division(gradient):
                    message += (
                        f" (`{ast.unparse(b.node)}` passes the quotient as the upstream "
                        "gradient, which multiplies the gradients by the loss itself: "
                        "backpropagate the divided loss instead)"
                    )
                yield self.finding(analysis, b.node, message)

    def _scaling_helpers(self, analysis: FileAnalysis) -> Iterator[Finding]:
        """A helper class with no backward of its own whose step method steps every ``n``
        calls (``if cur_iter % self.accumulate_iter == 0: self.scaler.step(opt)``) and whose
        method hands back ``self.scaler.scale(loss)`` for its callers to backpropagate: the
        loss it is given is scaled undivided, so ``n`` undivided losses add up before the
        step. Silent when a call of the method in this file passes a quotient."""
        by_class: dict[int, list[Unit]] = {}
        for unit in analysis.units:
            if unit.cls is not None:
                by_class.setdefault(id(unit.cls), []).append(unit)
        for units in by_class.values():
            if any(u.of("backward") for u in units):
                continue
            divisor = next(
                (
                    e.ctx.accum
                    for u in units
                    for e in u.of("scaler_step", "opt_step")
                    if e.ctx.accum is not None
                ),
                None,
            )
            if divisor is None:
                continue
            for unit in units:
                for scale in unit.of("scale"):
                    loss = _returned_parameter_scaled(unit.node, scale.node)
                    if loss is None or _called_with_quotient(analysis, unit.node):
                        continue
                    name = getattr(unit.node, "name", "?")
                    yield self.finding(
                        analysis,
                        scale.node,
                        f"this class steps every `{divisor}` calls, but `{name}` scales the "
                        f"`{loss}` it is given undivided: the backward of what it returns adds "
                        f"up `{divisor}` undivided losses before the step; scale `{loss} / "
                        f"{divisor}` instead",
                    )

    @staticmethod
    def _accumulating_step(steps: list[Event], b: Event) -> Event | None:
        """The guarded step that consumes ``b``'s gradients. The first step after ``b`` in
        the same iteration takes them: when it runs every iteration (a critic stepped after
        its own backward, beside an actor updated every ``policy_delay`` iterations), the
        gradients of ``b`` are not accumulated."""
        after = [
            s
            for s in steps
            if s.order > b.order and s.loops and s.loops[-1] == b.loops[-1] and not exclusive(s, b)
        ]
        if after:
            return after[0] if after[0].ctx.accum else None
        for s in steps:
            if s.ctx.accum and s.loops and s.loops[-1] == b.loops[-1] and not exclusive(s, b):
                return s
        return None


def _returned_parameter_scaled(fn: ast.AST, call: ast.AST) -> str | None:
    """The parameter ``fn`` returns scaled by ``call`` (``return self.scaler.scale(loss)``,
    ``loss`` a parameter never rebound in ``fn``), ``None`` for any other shape."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    if not isinstance(call, ast.Call) or len(call.args) != 1:
        return None
    arg = call.args[0]
    if not isinstance(arg, ast.Name) or arg.id not in parameter_names(fn):
        return None
    returned = any(isinstance(n, ast.Return) and n.value is call for n in ast.walk(fn))
    rebound = any(
        isinstance(n, ast.Name) and n.id == arg.id and isinstance(n.ctx, ast.Store)
        for n in ast.walk(fn)
    )
    return arg.id if returned and not rebound else None


def _called_with_quotient(analysis: FileAnalysis, fn: ast.AST) -> bool:
    """Whether a call of the method ``fn`` in this file passes a quotient (the caller
    divides the loss before it is scaled)."""
    name = getattr(fn, "name", None)
    for call in analysis.facts.of_type(ast.Call):
        func = call.func  # type: ignore[attr-defined]
        if isinstance(func, ast.Attribute) and func.attr == name:
            if any(_has_division(a) for a in call.args):  # type: ignore[attr-defined]
                return True
    return False
