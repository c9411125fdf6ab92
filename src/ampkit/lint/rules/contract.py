"""Rules about the dtype contract: what the weights and the optimizer really train in."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from ampkit.lint.analysis import FileAnalysis
from ampkit.lint.findings import Finding, Severity
from ampkit.lint.rules.base import Rule, register

__all__ = ["PureBf16WithoutMaster"]

#: ``torch.optim`` optimizers that keep their state in the parameter's dtype, with no master.
_PLAIN = frozenset(
    {"Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "ASGD", "NAdam", "RAdam",
     "RMSprop", "Rprop", "SGD", "SparseAdam"}
)  # fmt: skip
#: Names whose presence in a file means the low-precision weights are looked after: an fp32
#: master, Kahan summation or stochastic rounding.
_CARED = frozenset(
    {"CompensatedOptimizer", "Bf16True", "AnyPrecisionAdamW",
     "bf16_stochastic_round", "kahan_sum", "master_weights", "optimi"}
)  # fmt: skip


def _is_bf16(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr == "bfloat16"
    return isinstance(node, ast.Constant) and node.value in ("bfloat16", "bf16")


def _is_fp32(node: ast.expr | None) -> bool:
    if isinstance(node, ast.Attribute):
        return node.attr in ("float32", "float")
    return isinstance(node, ast.Constant) and node.value in ("float32", "fp32")


def _root(node: ast.expr) -> str | None:
    """The name a method chain starts from: ``model`` for ``model.to(...).train()``,
    ``self.model`` for ``self.model.bfloat16()`` (an attribute of the object)."""
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        if isinstance(node, ast.Attribute) and _is_self(node.value):
            return f"self.{node.attr}"
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def _target(node: ast.expr) -> str | None:
    """``model`` or ``self.model``: an assignment target the rule follows."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and _is_self(node.value):
        return f"self.{node.attr}"
    return None


def _dtype_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords if k.arg in ("dtype", "torch_dtype"))]


@dataclass(frozen=True)
class _Cast:
    """One change of a model's dtype: low (bf16, or ``dtype="auto"``) or back to fp32."""

    line: int
    low: bool
    how: str


def _bound_dtypes(statements: list[ast.stmt]) -> dict[str, ast.expr | _Chosen]:
    """Names a scope binds to a bf16 or fp32 literal (``dtype = torch.bfloat16``); a name bound
    to anything else as well is left out."""
    found: dict[str, list[ast.expr]] = {}
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node.value)
        stack.extend(ast.iter_child_nodes(node))
    bound: dict[str, ast.expr | _Chosen] = {}
    for name, values in found.items():
        if len(values) == 1 and (_is_bf16(values[0]) or _is_fp32(values[0])):
            bound[name] = values[0]
        elif all(_is_bf16(v) or _is_fp32(v) for v in values) and any(map(_is_bf16, values)):
            # ``if cfg["precision"] == "bfloat16": dtype = torch.bfloat16 else: ...``: the
            # configuration that picks bf16 trains the model in it
            bound[name] = _Chosen(name, next(v for v in values if _is_bf16(v)))
    return bound


@dataclass(frozen=True)
class _Chosen:
    """A name some branch binds to torch.bfloat16 and the others to fp32."""

    name: str
    value: ast.expr


def _casts(call: ast.Call, bound: dict[str, ast.expr | _Chosen] | None = None) -> _Cast | None:
    """What ``call`` does to the dtype of the model it returns or changes, if anything
    (``bound``: the scope's names of a dtype literal)."""
    bound = bound or {}

    def named(node: ast.expr) -> ast.expr:
        found = bound.get(node.id, node) if isinstance(node, ast.Name) else node
        return found.value if isinstance(found, _Chosen) else found

    def when(node: ast.expr) -> str:
        found = bound.get(node.id) if isinstance(node, ast.Name) else None
        return f", when {found.name} is torch.bfloat16" if isinstance(found, _Chosen) else ""

    func = call.func
    if not isinstance(func, ast.Attribute):
        return None
    if func.attr == "from_pretrained":
        for k in call.keywords:
            if k.arg in ("dtype", "torch_dtype"):
                if isinstance(k.value, ast.Constant) and k.value.value == "auto":
                    return _Cast(call.lineno, True, f'from_pretrained({k.arg}="auto")')
                if _is_bf16(named(k.value)):
                    how = f"from_pretrained({k.arg}=bfloat16{when(k.value)})"
                    return _Cast(call.lineno, True, how)
                return _Cast(call.lineno, False, "from_pretrained")
        return None
    if func.attr == "bfloat16" and not call.args:
        return _Cast(call.lineno, True, ".bfloat16()")
    if func.attr == "float" and not call.args:
        return _Cast(call.lineno, False, ".float()")
    if func.attr == "to":
        written = _dtype_args(call)
        args = [named(a) for a in written]
        if any(_is_bf16(a) for a in args):
            which = "".join(when(a) for a in written if _is_bf16(named(a)))
            return _Cast(call.lineno, True, f".to(torch.bfloat16{which})")
        if any(_is_fp32(a) for a in args):
            return _Cast(call.lineno, False, ".to(torch.float32)")
    return None


_WRAPPERS = frozenset(
    {"FSDP", "FullyShardedDataParallel", "DDP", "DistributedDataParallel", "DataParallel",
     "fully_shard", "compile"}
)  # fmt: skip


def _wraps(call: ast.Call, target: str | None, state: dict[str, _Cast]) -> _Cast | None:
    """The cast of the bf16 model a call wraps and ``target`` then holds: ``FSDP(model,
    mixed_precision=...)``, ``DDP(model)``, ``Eagle3Model(draft_model=draft_model)`` (its
    parameters are that model's, in bf16: FSDP's ``MixedPrecision`` keeps the dtype the
    module had as the one the optimizer steps)."""
    if target is None or isinstance(call.func, ast.Attribute) and call.func.attr == "parameters":
        return None
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    # a parallel wrapper holds the model it is given; another module built from it holds it
    # when it names it (``draft_model=draft_model``), not when it only reads a frozen model
    # it is handed first (``TunedLens(model, ...)`` trains its own translators)
    given = call.args if name in _WRAPPERS else []
    for arg in (*given, *(k.value for k in call.keywords)):
        key = _target(arg) if isinstance(arg, (ast.Name, ast.Attribute)) else None
        if key is not None and key != target and key in state and state[key].low:
            return state[key]
    return None


def _optimizer(call: ast.Call) -> tuple[str, set[str]] | None:
    """``(class name, models whose .parameters() it takes)`` for a plain ``torch.optim``
    optimizer call, else None."""
    func = call.func
    if isinstance(func, ast.Attribute):
        base = func.value
        within = (isinstance(base, ast.Attribute) and base.attr == "optim") or (
            isinstance(base, ast.Name) and base.id == "optim"
        )
        name = func.attr if within else None
    else:
        name = func.id if isinstance(func, ast.Name) else None
    if name not in _PLAIN or not call.args:
        return None
    models = {
        root
        for node in ast.walk(call.args[0])
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("parameters", "named_parameters")
        and (root := _root(node.func.value)) is not None
    }
    return (name, models) if models else None


def _scopes(tree: ast.Module) -> Iterator[list[ast.stmt]]:
    """The module's statements, then each function's, each without nested functions."""
    yield tree.body
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.body


def _calls(statements: list[ast.stmt]) -> Iterator[tuple[ast.Call, str | None]]:
    """Every call of the scope in source order, with the name an assignment gives its result
    (or the name a bare method call such as ``model.bfloat16()`` changes in place)."""
    found: list[tuple[tuple[int, int], ast.Call, str | None]] = []
    stack: list[ast.AST] = list(statements)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = _target(node.targets[0])
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            target = _root(node.value)
        if target is not None:
            value = node.value  # type: ignore[attr-defined]
            for sub in ast.walk(value):
                if isinstance(sub, ast.Call):
                    found.append(((sub.lineno, sub.col_offset), sub, target))
            continue
        if isinstance(node, ast.Call):
            found.append(((node.lineno, node.col_offset), node, None))
        stack.extend(ast.iter_child_nodes(node))
    for _, call, target in sorted(found, key=lambda item: item[0]):
        yield call, target


@register
class PureBf16WithoutMaster(Rule):
    """A model left in bf16 and trained by a plain ``torch.optim`` optimizer: pure bf16 with
    no fp32 master.

    ``from_pretrained(..., dtype="auto")`` (the default of transformers v5) loads a bf16
    checkpoint in bf16, as ``dtype=torch.bfloat16``, ``.bfloat16()`` or
    ``.to(torch.bfloat16)`` do on purpose. A ``torch.optim`` optimizer over those parameters
    then keeps the weights and its state (AdamW's two moments) in bf16, and autocast
    (``bf16=True``) changes nothing about it: every update smaller than half a bf16 ulp of its
    weight is rounded away, step after step, with no error (late-stage loss plateaus well
    above an fp32-master run). Keep the weights in fp32 (``model.float()``, or
    ``dtype=torch.float32``) and train under bf16 autocast, or train in pure bf16 on purpose
    with compensated updates (``ampkit.Bf16True``, Kahan summation or stochastic rounding).

    A dtype bound to a name first (``dtype = torch.bfloat16``) counts as written. In a class,
    an attribute loaded or cast to bf16 in one method (``self.model = ...from_pretrained(...,
    dtype=torch.bfloat16)``) and trained by a plain optimizer built in another is reported
    too, unless some method of the class casts it back to fp32 (which runs first is not
    known there).

    A model wrapped after the cast is still bf16: ``FSDP(model, mixed_precision=
    MixedPrecision(param_dtype=torch.bfloat16))`` shards the parameters in the dtype they
    have (FSDP's fp32 master is the module's own fp32 weights), and so do ``DDP(model)`` and
    a module built around it by keyword (``Eagle3Model(draft_model=draft_model)``; a module
    handed a model first, ``TunedLens(model, ...)``, may train parameters of its own).

    Not reported: a cast back to fp32 before the optimizer is built, and files that use an
    fp32 master or compensated updates (``CompensatedOptimizer``, ``Bf16True``,
    torchao's ``bf16_stochastic_round``, torch-optimi's ``kahan_sum``).

    Measured (not tuned on) over huggingface/alignment-handbook@925acdf, artidoro/qlora@7f4e95a,
    tatsu-lab/stanford_alpaca@761dc5b and OpenRLHF/OpenRLHF@3c3be62: no finding. None of them
    builds a plain ``torch.optim`` optimizer over a bf16 model in one function: they pass a
    ``dtype`` read from a config and train through the Hugging Face Trainer (TRL) or DeepSpeed,
    which this rule does not follow (the Hugging Face Trainer case is what ``AmpkitCallback``'s
    dtype contract checks at run time), so the rule's precision and recall are not measured yet.

    Bad::

        model = AutoModelForCausalLM.from_pretrained(name, dtype="auto")
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)

    Good::

        model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(**batch).loss
    """

    code = "AMP017"
    name = "pure-bf16-no-master"
    severity = Severity.WARNING
    summary = (
        "A model loaded or cast to bf16 is trained by a plain torch.optim optimizer: no fp32 "
        "master, small updates are lost."
    )

    def check(self, analysis: FileAnalysis) -> Iterator[Finding]:
        tree = analysis.tree
        nodes = analysis.nodes
        if not any(isinstance(n, ast.Call) and _optimizer(n) is not None for n in nodes):
            return  # no plain optimizer over a model's parameters: nothing to judge
        names = {
            n.id if isinstance(n, ast.Name) else n.attr
            for n in nodes
            if isinstance(n, (ast.Name, ast.Attribute))
        }
        modules = {
            alias.name.split(".")[0]
            for n in nodes
            if isinstance(n, (ast.Import, ast.ImportFrom))
            for alias in (n.names if isinstance(n, ast.Import) else [ast.alias(n.module or "")])
        }
        if names & _CARED or modules & _CARED:
            return
        reported: set[int] = set()
        for statements in _scopes(tree):
            state: dict[str, _Cast] = {}
            bound = _bound_dtypes(statements)
            for call, target in _calls(statements):
                cast = _casts(call, bound) or _wraps(call, target, state)
                if cast is not None and target is not None:
                    state[target] = cast
                    continue
                yield from self._judge(analysis, call, state, reported)
        for cls in (n for n in nodes if isinstance(n, ast.ClassDef)):
            yield from self._across_methods(analysis, cls, reported)

    def _across_methods(
        self, analysis: FileAnalysis, cls: ast.ClassDef, reported: set[int]
    ) -> Iterator[Finding]:
        """An attribute cast to bf16 in one method (``self.model = ...from_pretrained(...,
        dtype=torch.bfloat16)``) and trained by an optimizer built in another: which method
        runs first is not known, so an attribute some method casts back to fp32 is left
        alone."""
        methods = [m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        casts: dict[str, list[_Cast]] = {}
        for method in methods:
            bound = _bound_dtypes(method.body)
            for call, target in _calls(method.body):
                cast = _casts(call, bound)
                if cast is not None and target is not None and target.startswith("self."):
                    casts.setdefault(target, []).append(cast)
        state = {
            key: next(c for c in found if c.low)
            for key, found in casts.items()
            if all(c.low for c in found)
        }
        if not state:
            return
        for method in methods:
            for call, _ in _calls(method.body):
                yield from self._judge(analysis, call, state, reported)

    def _judge(
        self, analysis: FileAnalysis, call: ast.Call, state: dict[str, _Cast], reported: set[int]
    ) -> Iterator[Finding]:
        """A finding when ``call`` builds a plain optimizer over a model ``state`` holds in
        bf16 (once per call)."""
        built = _optimizer(call)
        if built is None or id(call) in reported:
            return
        optimizer, models = built
        low = [m for m in sorted(models) if m in state and state[m].low]
        if low:
            reported.add(id(call))
            model = low[0]
            how = state[model]
            yield self.finding(
                analysis,
                call,
                f"{model} holds bf16 weights ({how.how} on line {how.line}) and "
                f"{optimizer} over its parameters keeps them and its state in bf16 with "
                "no fp32 master (updates under half a bf16 ulp are lost); cast the "
                f"model to fp32 ({model}.float()) and train under bf16 autocast, or "
                "use ampkit.Bf16True for compensated pure bf16",
            )
