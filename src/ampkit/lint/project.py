"""Project-wide facts: what the files of one linted tree tell each other.

Linting a tree first summarises every file once (:func:`summarise`: a parse and one walk)
into a :class:`ModuleSummary` (its autocast wrappers, its module-level dtype values, what
its framework constructors say about loss scaling, which keywords its calls pass), and
collects the summaries into a :class:`ProjectIndex` keyed by module name. Each file is then
analysed on its own, as before, with a :class:`ProjectView` that resolves the names it
imports from the tree's own modules (``from utils import autocast_ctx``,
``from .config import DTYPE``). Findings stay per file and do not depend on the order the
files are given in or on how many processes lint them.

An autocast wrapper is a module-level function that returns an autocast call (or a
conditional of one: ``torch.autocast(...) if amp else nullcontext()``) or a
``@contextmanager`` that yields inside ``with torch.autocast(...)``; each of the autocast's
device, dtype and ``enabled`` arguments is recorded either as a value resolved where the
wrapper is written or as the name of the wrapper parameter it comes from, which the call
site then supplies.
"""

from __future__ import annotations

import ast
import re
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from ampkit.lint.frameworks import precision_evidence
from ampkit.lint.names import (
    AUTOCAST_APIS,
    CLIP_APIS,
    DTYPES,
    SCALER_APIS,
    Argument,
    Imports,
    Resolver,
    Wrapper,
    call_argument,
    dotted_key,
    is_scaler_name,
)
from ampkit.lint.patterns import clamps_in_hook, scale_returns_its_argument

__all__ = [
    "ANY_ARGS",
    "Argument",
    "ModuleSummary",
    "ProjectIndex",
    "ProjectView",
    "Wrapper",
    "local_clippers",
    "scaler_steppers",
    "module_name",
    "note_call",
    "note_dtype_keywords",
    "option_summary",
    "summarise",
    "wrapper_of",
]

#: a call's positional count when it passes ``*args`` or ``**kwargs`` (any parameter)
ANY_ARGS = 1 << 20

_MAX_SUFFIX = 4


@dataclass
class ModuleSummary:
    """What one file offers the others (all plain data, cheap to send to worker processes)."""

    wrappers: dict[str, Wrapper] = field(default_factory=dict)
    dtypes: dict[str, frozenset[str]] = field(default_factory=dict)
    evidence: dict[str, set[str]] = field(default_factory=dict)
    set_keywords: set[str] = field(default_factory=set)
    positional: dict[str, int] = field(default_factory=dict)
    #: names of the module-level classes (a subclass in another file follows their methods)
    classes: set[str] = field(default_factory=set)
    #: ``add_argument`` options: dest -> (constant ``choices`` or None, constant default)
    options: dict[str, tuple[tuple[object, ...] | None, object]] = field(default_factory=dict)
    #: whether the file binds names at module level (also inside a module-level ``if``),
    #: which other files may read as flags (:mod:`ampkit.lint.pairing` reads them there)
    flags: bool = False
    #: whether the file builds a GradScaler
    scaler: bool = False
    #: whether the file calls a scaler's ``update()`` (``scaler.update()``)
    scaler_update: bool = False
    #: keyword -> the torch dtypes calls pass it (``fit(..., amp_dtype=torch.bfloat16)``)
    dtype_keywords: dict[str, set[str]] = field(default_factory=dict)
    #: the reductions of the file's torch loss calls (``"mean"`` when none is passed, the
    #: literal or the enclosing parameter's literal default, ``"?"`` when unknown)
    reductions: set[str] = field(default_factory=set)
    #: modules the file imports names from, as written (``.valle``, ``pkg.models``)
    imported: set[str] = field(default_factory=set)
    #: module-level functions that register gradient hooks which clamp (run inside backward)
    hook_clippers: set[str] = field(default_factory=set)
    #: module-level functions that clip gradients with torch's clip functions, and classes
    #: whose ``__call__`` does (``ClipGrad(cfg)(model)``)
    clippers: set[str] = field(default_factory=set)
    #: module-level functions that step and update a GradScaler they are handed
    #: (``def step_and_log(scaler, opt, ...): scaler.step(opt); scaler.update()``): name ->
    #: the position of that parameter
    scaler_steppers: dict[str, int] = field(default_factory=dict)
    #: module-level classes whose ``scale(x)`` returns ``x`` (stand-ins for a GradScaler
    #: that scale nothing: ``DummyScaler()``), no scaler for the files that import them
    dummy_scalers: set[str] = field(default_factory=set)
    #: names the module imports from another module of the tree (``from .clip_grad import
    #: ClipGrad`` in a package's ``__init__``): name -> the import as written
    reexports: dict[str, str] = field(default_factory=dict)


_WORTH_RESOLVING = re.compile(r"autocast|float16|bfloat16|half")


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Names bound once at module level (``DTYPE = torch.float16``), class attributes as
    ``Cls.name``."""
    values: dict[str, ast.expr] = {}
    counts: dict[str, int] = defaultdict(int)

    def note(prefix: str, body: list[ast.stmt]) -> None:
        for stmt in body:
            targets: list[ast.expr] = []
            value: ast.expr | None = None
            if isinstance(stmt, ast.Assign):
                targets, value = stmt.targets, stmt.value
            elif isinstance(stmt, ast.AnnAssign):
                targets, value = [stmt.target], stmt.value
            elif isinstance(stmt, ast.AugAssign):
                targets = [stmt.target]
            elif isinstance(stmt, ast.ClassDef) and not prefix:
                note(f"{stmt.name}.", stmt.body)
                continue
            for target in targets:
                for named in ast.walk(target):
                    if isinstance(named, ast.Name):
                        counts[prefix + named.id] += 1
                        if value is not None and named is target:
                            values[prefix + named.id] = value

    note("", tree.body)
    return {k: v for k, v in values.items() if counts[k] == 1}


def _argument(node: ast.expr | None, params: set[str], resolver: Resolver) -> Argument:
    if node is None:
        return Argument()
    if isinstance(node, ast.Name) and node.id in params:
        return Argument(param=node.id, given=True)
    return Argument(
        dtypes=resolver.dtypes(node),
        text=resolver.string(node),
        false=resolver.is_false(node),
        given=True,
    )


def _autocast_call(node: ast.expr | None, resolver: Resolver) -> ast.Call | None:
    """The autocast call a returned expression makes (``autocast(...) if c else nullcontext()``)."""
    if isinstance(node, ast.IfExp):
        return _autocast_call(node.body, resolver) or _autocast_call(node.orelse, resolver)
    if isinstance(node, ast.Call) and resolver.imports.qualname(node.func) in AUTOCAST_APIS:
        return node
    return None


def _wrapped_call(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, resolver: Resolver
) -> ast.Call | None:
    body = [
        s for s in fn.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
    ]
    if not body:
        return None
    last = body[-1]
    if isinstance(last, ast.Return):
        return _autocast_call(last.value, resolver)
    decorators = {resolver.imports.qualname(d) or getattr(d, "id", "") for d in fn.decorator_list}
    if not decorators & {"contextlib.contextmanager", "contextmanager"}:
        return None
    stack: list[ast.AST] = list(reversed(body))
    while stack:  # the first ``with autocast(...)`` that yields, also inside an ``if``
        stmt = stack.pop()
        if isinstance(stmt, ast.With) and any(
            isinstance(n, ast.Yield) for s in stmt.body for n in ast.walk(s)
        ):
            for item in stmt.items:
                found = _autocast_call(item.context_expr, resolver)
                if found is not None:
                    return found
        if isinstance(stmt, ast.stmt) and not isinstance(
            stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
        ):
            stack.extend(
                reversed([c for c in ast.iter_child_nodes(stmt) if isinstance(c, ast.stmt)])
            )
    return None


def wrapper_of(fn: ast.FunctionDef | ast.AsyncFunctionDef, resolver: Resolver) -> Wrapper | None:
    """The :class:`Wrapper` a module-level function is, ``None`` when it is not one."""
    call = _wrapped_call(fn, resolver)
    if call is None:
        return None
    api = resolver.imports.qualname(call.func) or ""
    fixed = AUTOCAST_APIS.get(api)
    args = fn.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    names = {*positional, *(a.arg for a in args.kwonlyargs)}
    defaults: dict[str, Argument] = {}
    with_defaults = positional[len(positional) - len(args.defaults) :]
    for name, default in zip(with_defaults, args.defaults, strict=True):
        defaults[name] = _argument(default, set(), resolver)
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        if kw_default is not None:
            defaults[arg.arg] = _argument(kw_default, set(), resolver)
    if fixed is None:
        device_node, dtype_node, enabled_node = (
            call_argument(call, 0, "device_type"),
            call_argument(call, 1, "dtype"),
            call_argument(call, 2, "enabled"),
        )
    else:
        device_node, dtype_node, enabled_node = (
            None,
            call_argument(call, 1, "dtype"),
            call_argument(call, 0, "enabled"),
        )
    arguments = [
        _argument(node, names, resolver) for node in (device_node, dtype_node, enabled_node)
    ]
    forwarded = args.kwarg.arg if args.kwarg is not None else None
    if forwarded is not None and any(
        kw.arg is None and isinstance(kw.value, ast.Name) and kw.value.id == forwarded
        for kw in call.keywords
    ):
        # ``torch.autocast(device_type=d, **kwargs)``: the caller's ``dtype=``/``enabled=``
        # keywords reach autocast under their own names
        for i, name in enumerate(("device_type", "dtype", "enabled")):
            if not arguments[i].given and not (fixed is not None and i == 0):
                arguments[i] = Argument(param=name)
    return Wrapper(
        api,
        tuple(positional),
        tuple(sorted(defaults.items())),
        arguments[0],
        arguments[1],
        arguments[2],
        fixed,
    )


def note_call(call: ast.Call, set_keywords: set[str], positional: dict[str, int]) -> None:
    """Record which keywords a call passes (a value other than a literal False/None/0) and how
    many positional arguments its callee (by last name) receives."""
    count = len(call.args)
    for kw in call.keywords:
        if kw.arg is None:
            count = ANY_ARGS
        elif not (isinstance(kw.value, ast.Constant) and not kw.value.value):
            set_keywords.add(kw.arg)
    if any(isinstance(a, ast.Starred) for a in call.args):
        count = ANY_ARGS
    func = call.func
    callee = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if callee is not None and count > positional.get(callee, -1):
        positional[callee] = count


def summarise(text: str) -> ModuleSummary | None:
    """The :class:`ModuleSummary` of one source text, ``None`` when it does not parse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    summary = ModuleSummary()
    imports: list[ast.AST] = []
    calls: list[ast.Call] = []
    fields: list[ast.AnnAssign] = []
    try:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                calls.append(node)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imports.append(node)
            elif isinstance(node, ast.AnnAssign):
                fields.append(node)
    except RecursionError:
        return None
    imports.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
    table = Imports(imports)
    summary.classes = {s.name for s in tree.body if isinstance(s, ast.ClassDef)}
    for call in calls:
        note_call(call, summary.set_keywords, summary.positional)
        found = precision_evidence(call, table)
        if found is not None:
            summary.evidence.setdefault(found[0], set()).add(found[1])
        note_dtype_keywords(call, table, summary.dtype_keywords)
        func = call.func
        if (
            not summary.scaler
            and "Scaler" in str(getattr(func, "attr", None) or getattr(func, "id", ""))
            and table.qualname(func) in SCALER_APIS
        ):
            summary.scaler = True
        if (
            not summary.scaler_update
            and isinstance(func, ast.Attribute)
            and func.attr == "update"
            and is_scaler_name(dotted_key(func.value))
        ):
            summary.scaler_update = True
    if "add_argument" in text or "Literal" in text:
        summary.options = option_summary(calls, fields)
    summary.reductions = loss_reductions(tree, calls)
    for node in imports:
        if isinstance(node, ast.ImportFrom):
            summary.imported.add("." * node.level + (node.module or ""))
    summary.flags = any(isinstance(s, (ast.Assign, ast.AnnAssign, ast.If)) for s in tree.body)
    if "clip_grad" in text:
        summary.clippers = local_clippers(tree, table)
    if ".update()" in text:
        summary.scaler_steppers = scaler_steppers(tree)
    if "def scale" in text:
        summary.dummy_scalers = {
            stmt.name
            for stmt in tree.body
            if isinstance(stmt, ast.ClassDef) and scale_returns_its_argument(stmt)
        }
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.level or node.module):
            source = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    summary.reexports[alias.asname or alias.name] = f"{source}.{alias.name}"
    if "_hook" in text:
        summary.hook_clippers = {
            stmt.name
            for stmt in tree.body
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
            and any(isinstance(n, ast.Call) and clamps_in_hook(n) for n in ast.walk(stmt))
        }
    if _WORTH_RESOLVING.search(text):
        resolver = Resolver(
            table, {k: v for k, v in _module_constants(tree).items() if "." not in k}
        )
        for name, value in _module_constants(tree).items():
            dtypes = resolver.dtypes(value)
            if dtypes:
                summary.dtypes[name] = dtypes
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                wrapper = wrapper_of(stmt, resolver)
                if wrapper is not None:
                    summary.wrappers[stmt.name] = wrapper
    return summary


def scaler_steppers(tree: ast.Module) -> dict[str, int]:
    """Module-level functions that call ``step(...)`` and ``update()`` on a parameter named
    for a GradScaler, with that parameter's position."""
    found: dict[str, int] = {}
    for stmt in tree.body:
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        params = [a.arg for a in (*stmt.args.posonlyargs, *stmt.args.args)]
        called: dict[str, set[str]] = {}
        for node in ast.walk(stmt):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
            ):
                called.setdefault(node.func.value.id, set()).add(node.func.attr)
        for index, name in enumerate(params):
            if is_scaler_name(name) and {"step", "update"} <= called.get(name, set()):
                found[stmt.name] = index
                break
    return found


_NOT_CLIP_ONLY = frozenset({"unscale_", "step", "backward", "update", "scale"})


def local_clippers(tree: ast.Module, table: Imports) -> set[str]:
    """Module-level functions whose own body calls torch's clip functions, and classes
    whose ``__call__`` does: clip helpers only (one that also unscales, steps or backwards
    is a step of its own, not a clip at its call)."""

    def clips(fn: ast.AST) -> bool:
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
        return any(table.qualname(n.func) in CLIP_APIS for n in calls) and not any(
            isinstance(n.func, ast.Attribute) and n.func.attr in _NOT_CLIP_ONLY for n in calls
        )

    found: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and clips(stmt):
            found.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            call = next(
                (
                    m
                    for m in stmt.body
                    if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and m.name == "__call__"
                ),
                None,
            )
            if call is not None and clips(call):
                found.add(stmt.name)
    return found


#: torch loss functions and modules that take ``reduction=`` (mean by default)
_LOSSES = frozenset(
    {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
     "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "ctc_loss",
     "CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss",
     "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "CTCLoss"}
)  # fmt: skip


def _loss_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _reduction(call: ast.Call) -> str | ast.expr:
    """A loss call's reduction: ``"mean"`` when none is passed, the literal, ``"?"`` when
    ``**kwargs`` may carry one, or the expression passed."""
    value = next((kw.value for kw in call.keywords if kw.arg == "reduction"), None)
    if value is None:
        return "?" if any(kw.arg is None for kw in call.keywords) else "mean"
    if isinstance(value, ast.Constant):
        return str(value.value)
    return value


def loss_reductions(tree: ast.AST, calls: list[ast.Call] | None = None) -> set[str]:
    """The reductions the torch loss calls of ``tree`` use: the ``reduction=`` literal, the
    literal default of the enclosing function's parameter it names, ``"mean"`` when none is
    passed, ``"?"`` when it cannot be told. ``calls``: the tree's calls, when known."""
    if calls is None:
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    reductions = [_reduction(c) for c in calls if _loss_name(c) in _LOSSES]
    if not any(isinstance(r, ast.Name) for r in reductions):
        # no parameter to follow to its default: no need to walk the functions
        return {r if isinstance(r, str) else "?" for r in reductions}
    found: set[str] = set()

    def visit(node: ast.AST, defaults: dict[str, object]) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            positional = args.posonlyargs + args.args
            inner = dict(defaults)
            for arg in positional:
                inner.pop(arg.arg, None)
            for arg, default in zip(positional[::-1], args.defaults[::-1], strict=False):
                if isinstance(default, ast.Constant):
                    inner[arg.arg] = default.value
            for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=False):
                if isinstance(kw_default, ast.Constant):
                    inner[arg.arg] = kw_default.value
            defaults = inner
        if isinstance(node, ast.Call) and _loss_name(node) in _LOSSES:
            reduction = _reduction(node)
            if isinstance(reduction, str):
                found.add(reduction)
            elif isinstance(reduction, ast.Name) and isinstance(defaults.get(reduction.id), str):
                found.add(str(defaults[reduction.id]))
            else:
                found.add("?")
        for child in ast.iter_child_nodes(node):
            visit(child, defaults)

    try:
        visit(tree, {})
    except RecursionError:
        return {"?"}
    return found


_DTYPE_ATTRS = frozenset(name.rsplit(".", 1)[-1] for name in DTYPES)
_TENSOR_METHODS = frozenset(
    {"to", "type", "astype", "view", "zeros", "ones", "empty", "full", "tensor", "randn",
     "rand", "arange", "as_tensor", "new_zeros", "new_ones", "new_empty", "new_full",
     "new_tensor", "autocast"}
)  # fmt: skip


def note_dtype_keywords(call: ast.Call, imports: Imports, found: dict[str, set[str]]) -> None:
    """Record the torch dtypes a call of the project's own code passes by keyword
    (``fit(..., amp_dtype=torch.bfloat16)``); torch's calls and tensor methods
    (``torch.zeros(n, dtype=torch.float16)``, ``x.to(dtype=...)``) say nothing of them."""
    if not any(
        isinstance(kw.value, ast.Attribute) and kw.value.attr in _DTYPE_ATTRS
        for kw in call.keywords
    ):
        return
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr in _TENSOR_METHODS:
        return
    callee = imports.qualname(func)
    if callee is not None and callee.split(".", 1)[0] in ("torch", "numpy", "np"):
        return
    for kw in call.keywords:
        if kw.arg is not None and isinstance(kw.value, ast.Attribute):
            name = imports.qualname(kw.value)
            if name in DTYPES:
                found.setdefault(kw.arg, set()).add(DTYPES[name])


def option_summary(
    calls: list[ast.Call], fields: list[ast.AnnAssign] | None = None
) -> dict[str, tuple[tuple[object, ...] | None, object]]:
    """The options of a file: dest -> (constant ``choices`` or None, default), from its
    ``add_argument`` calls and its ``Literal`` fields (``precision: Literal["bf16", "fp32"]
    = "bf16"`` in a config class)."""
    found: dict[str, tuple[tuple[object, ...] | None, object]] = {}
    for node in fields or ():
        annotation = node.annotation
        if not (
            isinstance(node.target, ast.Name)
            and isinstance(annotation, ast.Subscript)
            and (getattr(annotation.value, "id", None) or getattr(annotation.value, "attr", ""))
            == "Literal"
        ):
            continue
        items = (
            annotation.slice.elts if isinstance(annotation.slice, ast.Tuple) else [annotation.slice]
        )
        if all(isinstance(e, ast.Constant) for e in items):
            initial = node.value.value if isinstance(node.value, ast.Constant) else None
            found[node.target.id] = (tuple(e.value for e in items), initial)  # type: ignore[attr-defined]
    for call in calls:
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "add_argument"):
            continue
        dest: str | None = None
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                if arg.value.startswith("--") or dest is None:
                    dest = arg.value.lstrip("-").replace("-", "_")
        choices: tuple[object, ...] | None = None
        default: object = None
        for kw in call.keywords:
            if kw.arg == "dest" and isinstance(kw.value, ast.Constant):
                dest = str(kw.value.value)
            elif kw.arg == "choices" and isinstance(kw.value, (ast.List, ast.Tuple, ast.Set)):
                if all(isinstance(e, ast.Constant) for e in kw.value.elts):
                    choices = tuple(e.value for e in kw.value.elts)  # type: ignore[attr-defined]
            elif kw.arg == "default" and isinstance(kw.value, ast.Constant):
                default = kw.value.value
            elif kw.arg == "action" and isinstance(kw.value, ast.Constant):
                if kw.value.value in ("store_true", "store_false"):
                    choices = (True, False)
        if dest:
            found[dest] = (choices, default)
    return found


def module_name(path: PurePath, root: PurePath) -> str:
    """The dotted module name of ``path`` seen from ``root`` (``pkg/utils.py`` -> ``pkg.utils``)."""
    try:
        parts = list(path.relative_to(root).parts)
    except ValueError:
        parts = [path.name]
    if parts and parts[-1].endswith(".py"):
        parts[-1] = parts[-1][:-3]
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(p for p in parts if p)


class ProjectIndex:
    """The summaries of every file of a tree, by module name (built once per run)."""

    def __init__(self, summaries: list[tuple[str, str, ModuleSummary]]) -> None:
        """``summaries`` holds ``(module name, file path, summary)`` triples."""
        self._by_suffix: dict[str, list[tuple[str, str, ModuleSummary]]] = defaultdict(list)
        #: first parts of every module-name suffix (a quick "not a module of the tree")
        self.heads: set[str] = set()
        self.evidence: dict[str, set[str]] = defaultdict(set)
        self.set_keywords: set[str] = set()
        self.positional: dict[str, int] = {}
        self.options: dict[str, tuple[tuple[object, ...] | None, object]] = {}
        self.dtype_keywords: dict[str, set[str]] = defaultdict(set)
        #: whether some file of the tree builds a GradScaler
        self.any_scaler = False
        #: whether some file of the tree calls a scaler's ``update()``
        self.any_scaler_update = False
        #: per-process store of what the analysis derived from other files of the tree (the
        #: parsed base-class files of :mod:`ampkit.lint.inherit`); empty when sent to a worker
        self.cache: dict[str, object] = {}
        for module, path, summary in sorted(summaries, key=lambda t: (t[1], t[0])):
            parts = module.split(".") if module else []
            for start in range(max(0, len(parts) - _MAX_SUFFIX), len(parts)):
                self._by_suffix[".".join(parts[start:])].append((module, path, summary))
                self.heads.add(parts[start])
            for family, seen in summary.evidence.items():
                self.evidence[family] |= seen
            self.set_keywords |= summary.set_keywords
            for dest, option in summary.options.items():
                self.options.setdefault(dest, option)
            self.any_scaler = self.any_scaler or summary.scaler
            self.any_scaler_update = self.any_scaler_update or summary.scaler_update
            for keyword, dtypes in summary.dtype_keywords.items():
                self.dtype_keywords[keyword] |= dtypes
            for callee, count in summary.positional.items():
                if count > self.positional.get(callee, -1):
                    self.positional[callee] = count

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "cache": {}}

    def __len__(self) -> int:
        return len({path for found in self._by_suffix.values() for _, path, _ in found})

    def find(self, module: str, near: str) -> ModuleSummary | None:
        """The summary of ``module``: the file whose module name ends with it, the one nearest
        to ``near`` (the importing file's path) when several do."""
        entry = self.entry(module, near)
        return entry[2] if entry is not None else None

    def entry(self, module: str, near: str) -> tuple[str, str, ModuleSummary] | None:
        """``(module name, path, summary)`` of ``module`` as :meth:`find` chooses it."""
        found = self._by_suffix.get(module)
        if not found:
            return None
        if len(found) == 1:
            return found[0]
        here = PurePath(near).parent.parts

        def closeness(entry: tuple[str, str, ModuleSummary]) -> tuple[int, int, str]:
            there = PurePath(entry[1]).parts
            common = 0
            for a, b in zip(here, there, strict=False):
                if a != b:
                    break
                common += 1
            return (-int(entry[0] == module), -common, entry[1])

        return min(found, key=closeness)

    def view(self, path: str | Path, module: str) -> ProjectView:
        """The index as seen from one file (its path and module name)."""
        return ProjectView(self, str(path), module)


def _absolute_name(qualname: str, module: str, path: str) -> str:
    """``.utils.f`` written in the module ``module`` (file ``path``) -> ``pkg.utils.f``."""
    level = len(qualname) - len(qualname.lstrip("."))
    if not level:
        return qualname
    package = module.split(".") if module else []
    if not PurePath(path).name.startswith("__init__."):
        package = package[:-1]
    if level > 1:
        package = package[: len(package) - (level - 1)] if level - 1 <= len(package) else []
    rest = qualname[level:]
    return ".".join([*package, rest]) if package else rest


class ProjectView:
    """The project index as one file sees it: resolves that file's imported names."""

    def __init__(self, index: ProjectIndex, path: str, module: str) -> None:
        self.index = index
        self.path = path
        self.module = module
        self._found: dict[str, tuple[tuple[str, str, ModuleSummary], str] | None] = {}

    @property
    def evidence(self) -> dict[str, set[str]]:
        """Framework evidence of the whole tree."""
        return self.index.evidence

    @property
    def set_keywords(self) -> set[str]:
        """Keywords some call in the tree passes a possibly true value."""
        return self.index.set_keywords

    @property
    def positional(self) -> dict[str, int]:
        """Callee name -> the most positional arguments a call in the tree passes it."""
        return self.index.positional

    @property
    def options(self) -> dict[str, tuple[tuple[object, ...] | None, object]]:
        """``add_argument`` options of the tree: dest -> (``choices`` or None, default)."""
        return self.index.options

    @property
    def dtype_keywords(self) -> dict[str, set[str]]:
        """Keyword -> the torch dtypes calls of the tree pass it."""
        return self.index.dtype_keywords

    @property
    def any_scaler(self) -> bool:
        """Whether some file of the tree builds a GradScaler."""
        return self.index.any_scaler

    @property
    def any_scaler_update(self) -> bool:
        """Whether some file of the tree calls a scaler's ``update()``."""
        return self.index.any_scaler_update

    def loss_reductions(self, own: set[str], depth: int = 2) -> set[str]:
        """The reductions of the torch loss calls in this file (``own``) and in the tree's
        modules it imports from, followed ``depth`` imports deep."""
        found = set(own)
        frontier: list[tuple[str, str]] = [(self.module, self.path)]
        seen = {self.path}
        for _ in range(depth):
            following: list[tuple[str, str]] = []
            for module, path in frontier:
                here = ProjectView(self.index, path, module)
                summary = self.index.find(module, path)
                if summary is None:
                    continue
                for imported in summary.imported:
                    target = here._module_entry(imported)
                    if target is None or target[1] in seen:
                        continue
                    seen.add(target[1])
                    found |= target[2].reductions
                    following.append((target[0], target[1]))
            frontier = following
        return found

    def _module_entry(self, qualname: str) -> tuple[str, str, ModuleSummary] | None:
        """The index entry of the module ``qualname`` (absolute or relative) names."""
        absolute = self._absolute(qualname)
        if not absolute:
            return None
        if absolute.split(".")[0] not in self.index.heads and not qualname.startswith("."):
            return None
        return self.index.entry(absolute, self.path)

    def bindings(self, qualname: str) -> tuple[str, str] | None:
        """``(path, name there)`` of the tree's module ``qualname`` lives in; ``None`` when
        the tree has no such module (other than this file) or it binds nothing at module level."""
        found = self._entry(qualname)
        if found is None or found[0][1] == self.path or not found[0][2].flags:
            return None
        (_, path, _), name = found
        return path, name

    def _absolute(self, qualname: str) -> str:
        """``.utils.f`` (relative, from ``pkg.train``) -> ``pkg.utils.f``."""
        return _absolute_name(qualname, self.module, self.path)

    def _lookup(self, qualname: str) -> tuple[ModuleSummary, str] | None:
        """The summary of the tree's module ``qualname`` lives in, and its name there."""
        found = self._entry(qualname)
        return (found[0][2], found[1]) if found is not None else None

    def _entry(self, qualname: str) -> tuple[tuple[str, str, ModuleSummary], str] | None:
        """The index entry of the module ``qualname`` lives in, and its name there."""
        if qualname in self._found:
            return self._found[qualname]
        found = None
        parts = self._absolute(qualname).split(".")
        if parts[0] in self.index.heads or qualname.startswith("."):
            for cut in range(len(parts) - 1, 0, -1):
                entry = self.index.entry(".".join(parts[:cut]), self.path)
                if entry is not None:
                    found = entry, ".".join(parts[cut:])
                    break
        self._found[qualname] = found
        return found

    def class_source(self, qualname: str) -> tuple[str, str, str] | None:
        """``(path, module name, class name)`` of the tree's class ``qualname`` names
        (``engine.base.Trainer``, ``.base.Trainer``), ``None`` when the tree defines none."""
        if qualname.startswith("torch."):
            return None
        found = self._entry(qualname)
        if found is None or found[1] not in found[0][2].classes or found[0][1] == self.path:
            return None
        (module, path, _), name = found
        return path, module, name

    def wrapper(self, qualname: str) -> Wrapper | None:
        """The autocast wrapper ``qualname`` names in the tree, if it is one."""
        if qualname.startswith("torch."):
            return None
        found = self._lookup(qualname)
        return found[0].wrappers.get(found[1]) if found is not None else None

    def clipper(self, qualname: str, depth: int = 0) -> bool:
        """Whether ``qualname`` names a function of the tree that clips gradients, or a class
        whose instances do when called, also through a package's re-export of it."""
        if qualname.startswith("torch.") or depth > 3:
            return False
        found = self._entry(qualname)
        if found is None:
            return False
        (module, path, summary), name = found
        if name in summary.clippers:
            return True
        source = summary.reexports.get(name)
        if source is None:
            return False
        source = _absolute_name(source, module, path)
        return source != qualname and self.clipper(source, depth + 1)

    def scaler_stepper(self, qualname: str) -> int | None:
        """The position of the GradScaler parameter of a function of the tree that steps
        and updates the scaler it is handed, ``None`` when ``qualname`` names no such one."""
        if qualname.startswith("torch."):
            return None
        found = self._lookup(qualname)
        return found[0].scaler_steppers.get(found[1]) if found is not None else None

    def dummy_scaler(self, qualname: str) -> bool:
        """Whether ``qualname`` names a class of the tree whose ``scale(x)`` returns ``x``
        (:func:`~ampkit.lint.patterns.scale_returns_its_argument`), also through a package's
        re-export of it."""
        if qualname.startswith("torch."):
            return False
        found = self._entry(qualname)
        if found is None:
            return False
        (module, path, summary), name = found
        if name in summary.dummy_scalers:
            return True
        source = summary.reexports.get(name)
        if source is None:
            return False
        source = _absolute_name(source, module, path)
        return source != qualname and self.dummy_scaler(source)

    def hook_clipper(self, qualname: str) -> bool:
        """Whether ``qualname`` names a function of the tree that registers gradient hooks
        which clamp (:func:`~ampkit.lint.patterns.clamps_in_hook`)."""
        if qualname.startswith("torch."):
            return False
        found = self._lookup(qualname)
        return found is not None and found[1] in found[0].hook_clippers

    def dtypes(self, qualname: str) -> frozenset[str]:
        """The dtypes a module-level name of the tree may hold (empty: none known)."""
        if qualname.startswith("torch."):
            return frozenset()
        found = self._lookup(qualname)
        return found[0].dtypes.get(found[1], frozenset()) if found is not None else frozenset()
