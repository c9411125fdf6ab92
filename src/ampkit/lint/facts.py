"""The file-wide facts the rules read, collected in one pass over a parsed file.

:class:`FileFacts` records what holds a scaler, an optimizer, a scaled loss or an autocast
context (``self.scaler = GradScaler()``, ``scaled = scaler.scale(loss)``,
``ctx = torch.autocast(...)``), the module-level functions, and which functions are worth
following from their callers. The name tables below say which calls matter.
"""

from __future__ import annotations

import ast
import functools
import re
from collections import defaultdict
from collections.abc import Iterable

from ampkit.lint.frameworks import (
    CLIP_METHODS,
    framework_of_ctor,
    framework_of_name,
    precision_evidence,
)
from ampkit.lint.names import (
    CLIP_CALL_NAMES,
    SCALER_APIS,
    AutocastInfo,
    Imports,
    Resolver,
    dotted_key,
    is_optimizer_name,
    is_scaler_name,
)
from ampkit.lint.patterns import scale_returns_its_argument
from ampkit.lint.project import ProjectView, local_clippers, note_call, wrapper_of
from ampkit.lint.walk import FunctionNode, Walk

__all__ = ["INTERESTING_ATTRS", "FileFacts", "FunctionNode"]

#: Method names whose calls make a function worth following from its callers
#: (``step``/``update`` only count on scaler- or optimizer-like objects).
INTERESTING_ATTRS = frozenset(
    {"backward", "manual_backward", "scale", "unscale_", "zero_grad", "clip_grad_norm_",
     "clip_grad_value_", "clip_gradients"}
)  # fmt: skip

#: Other method names that make events (casts, checkpoints) without making a callee worth
#: following from its callers.
_EVENT_ATTRS = frozenset({"half", "bfloat16", "float", "to", "type", "state_dict"})

#: Method names whose calls the flow reads by their own meaning, never by the class of the file
#: that happens to define one.
_OWN_NAMES = (
    INTERESTING_ATTRS
    | _EVENT_ATTRS
    | {"step", "update"}
    # ``torch.nn.Module`` methods: called on a model far more often than on the file's class
    | {"train", "eval", "forward", "cuda", "cpu", "apply", "parameters", "named_parameters",
       "modules", "named_modules", "children", "load_state_dict", "requires_grad_"}
)  # fmt: skip


_SCHEDULERS = re.compile(r"lr_scheduler|swa_utils")


def _parse_annotation(text: str) -> ast.expr | None:
    """The expression of a string annotation (``"torch.amp.GradScaler"``), if it parses."""
    try:
        return ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        return None


class FileFacts:
    """File-wide bindings used to classify calls (see the module docstring)."""

    def __init__(self, tree: ast.Module, walk: Walk, project: ProjectView | None = None) -> None:
        self.nodes = walk.nodes
        self.owners = walk.owners
        #: statement id -> the calls in its own expressions, in evaluation order
        self.calls = walk.calls
        self.by_type = walk.by_type
        imports = self.of_type(ast.Import, ast.ImportFrom)
        imports.sort(key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
        self.imports = Imports(imports)
        self.constants: dict[str, ast.expr] = {}
        self.scaler_keys: dict[str, ast.Call | None] = {}
        self.optimizer_keys: set[str] = set()
        self.scaled_keys: set[str] = set()
        self.autocast_vars: dict[str, AutocastInfo] = {}
        self.assignments: dict[str, list[ast.expr]] = defaultdict(list)
        self.functions: dict[str, FunctionNode] = {}
        #: key -> the framework the object belongs to (``fabric = Fabric(...)``)
        self.framework_keys: dict[str, str] = {}
        #: framework family -> what its constructors here show about loss scaling
        self.framework_evidence: dict[str, set[str]] = defaultdict(set)
        #: keyword names some call passes a value other than a literal False/None/0
        self.set_keywords: set[str] = set()
        #: callee name (last part) -> the most positional arguments a call passes it
        #: (:data:`~ampkit.lint.project.ANY_ARGS` with ``*args``/``**kwargs``)
        self.positional: dict[str, int] = {}
        self.scaler_ctors: list[ast.Call] = []
        #: keys that only ever hold no scaler (see :meth:`_collect_not_scalers`; filled
        #: once the bindings are known)
        self.not_scalers: set[str] = set()
        #: id of a function -> its local names every binding of which there is no scaler
        #: (``scaler = GradScaler(enabled=False)`` in one function, a real one in another)
        self.local_not_scalers: dict[int, set[str]] = {}
        #: classes of this file whose ``scale(x)`` returns ``x`` (dummy scalers)
        self.dummy_classes: set[str] = set()
        #: function name -> parameters every call here passes a scaled loss
        self.scaled_params: dict[str, set[str]] = {}
        #: modules frozen here: ``key.requires_grad_(False)``,
        #: ``for p in key.parameters(): p.requires_grad = False``
        self.frozen: set[str] = set()
        #: keys named like a scaler (``scaler``, ``self.grad_scaler``) that the file reads
        self.scaler_uses: set[str] = set()
        #: names of methods inherited from base classes in other files that make AMP-relevant
        #: calls there (a call of one is worth following; set before any flow is built)
        self.inherited: set[str] = set()
        self._owner_of: dict[int, FunctionNode | None] | None = None
        self.any_scaler_update = False
        self.any_scaler = False
        self.scaler_named = False
        self.tree = tree
        self._local_clippers: set[str] | None = None
        self._interesting: set[int] | None = None
        self._eventful: set[int] | None = None
        for stmt in tree.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self.functions[stmt.name] = stmt
        self._collect_constants()
        self.project = project
        self.resolver = Resolver(self.imports, self.constants, project)
        for name, fn in self.functions.items():
            wrapper = wrapper_of(fn, self.resolver)
            if wrapper is not None:
                self.resolver.wrappers[name] = wrapper
        self._zeroed: set[str] = set()
        self._stepped: set[str] = set()
        self._collect_bindings()
        # an object whose ``step()`` and ``zero_grad()`` are both called is an optimizer,
        # whatever its name (an optimizer wrapped with its LR schedule: ``scheduler.step()``)
        self.optimizer_keys |= self._zeroed & self._stepped
        self._collect_frozen_loops()
        self.not_scalers = self._collect_not_scalers()
        self.scaled_params = self._collect_scaled_params()

    def of_type(self, *kinds: type) -> list[ast.AST]:
        """The nodes of the given ast types (in no particular order)."""
        return [n for kind in kinds for n in self.by_type.get(kind, ())]

    def _collect_constants(self) -> None:
        counts: dict[str, int] = defaultdict(int)
        values: dict[str, ast.expr] = {}
        for node in self.of_type(
            ast.Assign,
            ast.AugAssign,
            ast.AnnAssign,
            ast.NamedExpr,
            ast.For,
            ast.AsyncFor,
            ast.comprehension,
            ast.arg,
        ):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    for named in ast.walk(target):
                        if isinstance(named, ast.Name):
                            counts[named.id] += 1
                            values[named.id] = node.value
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
                if isinstance(node.target, ast.Name):
                    counts[node.target.id] += 1
                    if node.value is not None:
                        values[node.target.id] = node.value
            elif isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
                for bound in ast.walk(node.target):
                    if isinstance(bound, ast.Name):
                        counts[bound.id] += 2
            elif isinstance(node, ast.arg):
                counts[node.arg] += 2
        for name, count in counts.items():
            value = values.get(name)
            if count == 1 and (
                isinstance(value, (ast.Constant, ast.Attribute, ast.Name, ast.IfExp))
                or isinstance(value, ast.Subscript)
                and isinstance(value.value, ast.Dict)
            ):
                # an ``a if c else b`` or ``{...}[key]`` is followed for the dtypes it may take
                self.constants[name] = value

    def _collect_bindings(self) -> None:
        for node in self.of_type(
            ast.Assign,
            ast.AnnAssign,
            ast.With,
            ast.AsyncWith,
            ast.AugAssign,
            ast.Call,
            ast.arg,
            ast.Name,
            ast.Attribute,
        ):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    self._bind(target, node.value)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                for item in node.items:
                    if item.optional_vars is not None:
                        self._bind(item.optional_vars, item.context_expr)
            elif isinstance(node, ast.AugAssign):
                key = dotted_key(node.target)
                if key is not None:
                    self.assignments[key].append(node)  # type: ignore[arg-type]
            elif isinstance(node, ast.Call):
                self._note_call(node)
            elif isinstance(node, ast.arg) and node.annotation is not None:
                annotation: ast.expr | None = node.annotation
                if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
                    annotation = _parse_annotation(annotation.value)
                if annotation is not None and self.imports.qualname(annotation) in SCALER_APIS:
                    self.scaler_keys.setdefault(node.arg, None)
            elif (
                isinstance(node, ast.Name)
                and is_scaler_name(node.id)
                or isinstance(node, ast.Attribute)
                and is_scaler_name(node.attr)
            ):
                self.scaler_named = True
                if self.imports.qualname(node) not in SCALER_APIS:
                    key = dotted_key(node)
                    self.scaler_uses.add(key if key is not None else "?")

    def _bind(self, target: ast.expr, value: ast.expr) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, ast.Call) and target.elts:
                framework = framework_of_ctor(self.imports.qualname(value.func))
                if framework == "deepspeed":
                    # ``engine, optimizer, _, _ = deepspeed.initialize(...)``
                    first = dotted_key(target.elts[0])
                    if first is not None:
                        self.framework_keys[first] = framework
            for elt in target.elts:
                self._bind(elt, value)
            return
        key = dotted_key(target)
        if key is None:
            return
        self.assignments[key].append(value)
        ctor = self.resolver.scaler_ctor(value)
        if ctor is not None:
            self.scaler_keys[key] = ctor
            self.any_scaler = True
        info = self.resolver.find_autocast(value)
        if info is not None and not info.disabled:
            self.autocast_vars[key] = info
        if isinstance(value, ast.Call):
            qual = self.imports.qualname(value.func) or ""
            name = value.func.attr if isinstance(value.func, ast.Attribute) else qual
            framework = framework_of_ctor(qual)
            if framework is not None and framework != "deepspeed":
                self.framework_keys[key] = framework
            if (
                qual.startswith("torch.optim.") and not _SCHEDULERS.search(qual)
            ) or "optimizer" in name.lower():
                self.optimizer_keys.add(key)
        if self.is_scaled(value):
            self.scaled_keys.add(key)

    def _note_call(self, call: ast.Call) -> None:
        func = call.func
        if self.resolver.scaler_ctor(call) is not None:
            self.any_scaler = True
            self.scaler_ctors.append(call)
        note_call(call, self.set_keywords, self.positional)
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "requires_grad_"
            and call.args
            and self.resolver.is_false(call.args[0])
        ):
            frozen = dotted_key(func.value)
            if frozen is not None:
                self.frozen.add(frozen)
        evidence = precision_evidence(call, self.imports)
        if evidence is not None:
            self.framework_evidence[evidence[0]].add(evidence[1])
        if not isinstance(func, ast.Attribute):
            return
        obj = dotted_key(func.value)
        if obj not in (None, "self") and not call.args and func.attr in ("step", "zero_grad"):
            (self._stepped if func.attr == "step" else self._zeroed).add(obj)
        if func.attr in ("step", "unscale_") and is_scaler_name(obj) and call.args:
            arg = dotted_key(call.args[0])
            if arg is not None:
                self.optimizer_keys.add(arg)
        if func.attr == "update" and self.is_scaler(obj):
            self.any_scaler_update = True
        if func.attr in ("scale", "unscale_") and self.is_scaler(obj):
            self.any_scaler = True

    @functools.cached_property
    def _methods_by_name(self) -> dict[str, list[FunctionNode]]:
        """Method name -> every method of this file's classes with that name, for the names a
        call on an object of unknown type may be followed by (no module-level function shares
        them; dunders and the names the rules read themselves, ``backward``, ``step``...,
        left out)."""
        found: dict[str, list[FunctionNode]] = defaultdict(list)
        for node in self.of_type(ast.ClassDef):
            for item in node.body:  # type: ignore[attr-defined]
                if (
                    isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and item.name not in self.functions
                    and item.name not in _OWN_NAMES
                    and not item.name.startswith("__")
                ):
                    found[item.name].append(item)
        return found

    def sole_method(self, name: str, own: Iterable[FunctionNode]) -> FunctionNode | None:
        """The method ``name`` of an object of unknown type called from a class whose
        methods are ``own``: the one method of that name in this file's classes
        (``runner.engine.backward_loss(loss)`` can only mean it here), or else the one with a
        body (a stub, ``pass`` or ``raise NotImplementedError`` under its docstring, left out)
        in a class other than the caller's own (``self._logic.train_step(...)`` in a handler
        whose own ``train_step`` makes the call, beside a base class's stub)."""
        found = self._methods_by_name.get(name, ())
        mine = {id(fn) for fn in own}
        if len(found) == 1:
            return None if id(found[0]) in mine else found[0]
        others = [fn for fn in found if id(fn) not in mine and not _stub(fn)]
        return others[0] if len(others) == 1 else None

    def is_interesting(self, fn: FunctionNode) -> bool:
        """Whether following a call into ``fn`` can add events (it makes AMP-relevant calls,
        or calls a function of this file that does)."""
        if self._interesting is None:
            self._interesting, self._eventful = self._find_interesting()
        return id(fn) in self._interesting

    def has_events(self, fn: FunctionNode) -> bool:
        """Whether a flow of ``fn`` can hold any event (a cheap filter before building it)."""
        if self._eventful is None:
            self._interesting, self._eventful = self._find_interesting()
        return id(fn) in self._eventful

    def _classify(self, call: ast.Call) -> tuple[bool, bool, str]:
        """``(interesting, event, name)`` of one call: does it feed the rules?"""
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name in INTERESTING_ATTRS or name in CLIP_CALL_NAMES:
            return True, True, name
        if (
            name in self.inherited
            and isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
        ):
            return True, True, name
        if name in ("step", "update") and isinstance(func, ast.Attribute):
            obj = dotted_key(func.value)
            if self.is_scaler(obj) or (
                name == "step" and (self.is_optimizer(obj) or self.framework_of(obj) == "deepspeed")
            ):
                return True, True, name
        if name in _EVENT_ATTRS and isinstance(func, ast.Attribute):
            return False, True, name
        qual = self.imports.qualname(func)
        if qual is not None and qual.startswith("torch."):
            if self.resolver.autocast(call) is not None:
                return True, True, name
            return False, qual == "torch.save" or qual in SCALER_APIS, name
        return False, False, name

    def _find_interesting(self) -> tuple[set[int], set[int]]:
        """Functions worth inlining, and functions whose flow can hold events.

        Every call counts for the function it is written in (``owners``); a function that
        calls an interesting function (by name) is interesting too.
        """
        direct: set[int] = set()
        eventful: set[int] = set()
        callers: dict[str, set[int]] = defaultdict(set)
        by_id: dict[int, FunctionNode] = {}
        for node, fn in zip(self.nodes, self.owners, strict=True):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                by_id[id(node)] = node
            if fn is None:
                continue
            owner = id(fn)
            if isinstance(node, ast.Call):
                follows, event, name = self._classify(node)
                if follows:
                    direct.add(owner)
                if event:
                    eventful.add(owner)
                callers[name].add(owner)
            elif isinstance(node, (ast.With, ast.AsyncWith)):
                eventful.add(owner)
        interesting = set(direct)
        queue = [by_id[i] for i in direct]
        while queue:
            callee = queue.pop()
            for caller in callers.get(callee.name, ()):
                if caller not in interesting:
                    interesting.add(caller)
                    queue.append(by_id[caller])
        return interesting, eventful | interesting

    def is_scaler(self, key: str | None, at: ast.AST | None = None) -> bool:
        """Whether ``key`` holds a GradScaler (constructed here, or named like one), and is
        not one that only ever holds no scaler (:meth:`_collect_not_scalers`), in the file
        or, for a local name read at ``at``, in the function it is read in."""
        return (
            key is not None
            and not self.holds_no_scaler(key, at)
            and (key in self.scaler_keys or is_scaler_name(key))
        )

    def holds_no_scaler(self, key: str | None, at: ast.AST | None = None) -> bool:
        """Whether every binding of ``key`` is no scaler (a literal ``enabled=False``, a
        dummy class): in the whole file, or for a local name, in the function ``at`` is in."""
        if key is None:
            return False
        if key in self.not_scalers:
            return True
        if at is None or not self.local_not_scalers or "." in key:
            return False
        owner = self.owner_of(at)
        return owner is not None and key in self.local_not_scalers.get(id(owner), ())

    def _collect_not_scalers(self) -> set[str]:
        """Keys every binding of which is no scaler: a GradScaler built with a literal
        ``enabled=False`` (its ``scale`` returns the loss, its ``step`` is the optimizer's),
        or an object of a class of this file whose ``scale(x)`` returns ``x`` (a dummy
        scaler). A key bound once to anything else (a real scaler, a parameter, an
        expression) keeps its meaning."""
        dummies = self.dummy_classes = {
            node.name  # type: ignore[attr-defined]
            for node in self.of_type(ast.ClassDef)
            if scale_returns_its_argument(node)  # type: ignore[arg-type]
        }
        found: set[str] = set()
        for key, values in self.assignments.items():
            if values and all(self._holds_no_scaler(v, dummies) for v in values):
                found.add(key)
        candidates = {
            key
            for key, values in self.assignments.items()
            if "." not in key
            and key not in found
            and any(self._holds_no_scaler(v, dummies) for v in values)
        }
        if candidates:
            # the same local name bound to no scaler in one function, to a scaler in another
            local: dict[int, dict[str, bool]] = defaultdict(dict)
            for node, owner in zip(self.nodes, self.owners, strict=True):
                if owner is None or not isinstance(node, (ast.Assign, ast.AnnAssign)):
                    continue
                if node.value is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in candidates:
                        seen = local[id(owner)]
                        none = self._holds_no_scaler(node.value, dummies)
                        seen[target.id] = seen.get(target.id, True) and none
            self.local_not_scalers = {
                owner: {name for name, none in names.items() if none}
                for owner, names in local.items()
            }
        return found

    def _collect_scaled_params(self) -> dict[str, set[str]]:
        """Parameters that every call in this file passes a scaled loss
        (``self._backward(self.scaler.scale(loss))``): function name -> parameter names.
        A function of that name called once with anything else at that place, or called
        with ``*args``/``**kwargs``, keeps the parameter unscaled."""
        params: dict[str, list[str]] = {}
        for node in self.of_type(ast.FunctionDef, ast.AsyncFunctionDef):
            args = node.args  # type: ignore[attr-defined]
            names = [a.arg for a in args.posonlyargs + args.args]
            name = node.name  # type: ignore[attr-defined]
            if name in params and params[name] != names:
                params[name] = []  # two functions of one name with other parameters
                continue
            params[name] = names
        seen: dict[tuple[str, str], bool] = {}
        for call in self.of_type(ast.Call):
            func = call.func  # type: ignore[attr-defined]
            taken: list[str] | None
            if isinstance(func, ast.Name):
                name, taken = func.id, params.get(func.id)
            elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
                name, taken = func.attr, params.get(func.attr)
                if taken and taken[0] in ("self", "cls"):
                    taken = taken[1:]
            else:
                continue
            if not taken:
                continue
            names = taken
            args = call.args  # type: ignore[attr-defined]
            keywords = call.keywords  # type: ignore[attr-defined]
            if any(isinstance(a, ast.Starred) for a in args) or any(
                k.arg is None for k in keywords
            ):
                for param in names:
                    seen[(name, param)] = False
                continue
            passed = list(zip(names, args, strict=False))
            passed += [(k.arg, k.value) for k in keywords if k.arg in names]
            for param, value in passed:
                key = (name, param)
                seen[key] = seen.get(key, True) and self.is_scaled_call(value)
        found: dict[str, set[str]] = defaultdict(set)
        for (name, param), scaled in seen.items():
            if scaled:
                found[name].add(param)
        return dict(found)

    def is_scaled_param(self, node: ast.AST, name: str) -> bool:
        """Whether ``name`` is a parameter of the function ``node`` is written in that every
        call in this file passes a scaled loss."""
        owner = self.owner_of(node)
        return owner is not None and name in self.scaled_params.get(owner.name, ())

    def _holds_no_scaler(self, value: ast.expr, dummies: set[str]) -> bool:
        if not isinstance(value, ast.Call):
            return False
        if self.resolver.scaler_ctor(value) is value:
            return self.resolver.scaler_enabled(value) == "no"
        return self.builds_dummy_scaler(value, dummies)

    def builds_dummy_scaler(self, call: ast.Call, dummies: set[str] | None = None) -> bool:
        """Whether ``call`` builds an object of a class whose ``scale(x)`` returns ``x``:
        one of this file, or one of another file of the tree it imports."""
        func = call.func
        if isinstance(func, ast.Name) and func.id in (
            self.dummy_classes if dummies is None else dummies
        ):
            return True
        if self.project is None or not isinstance(func, (ast.Name, ast.Attribute)):
            return False
        qual = self.imports.qualname(func)
        return qual is not None and "." in qual and self.project.dummy_scaler(qual)

    def calls_clipper(self, func: ast.expr) -> bool:
        """Whether calling ``func`` clips gradients: a function of the tree that calls
        torch's clip functions (``from utils import clip_grads``), or an object built from a
        class whose ``__call__`` does (``self.clip_grad = ClipGrad(cfg)`` then
        ``self.clip_grad(self.model)``), in this file or another module of the tree."""
        if self._local_clippers is None:
            self._local_clippers = local_clippers(self.tree, self.imports)
        if not self._local_clippers and self.project is None:
            return False
        key = dotted_key(func)
        if key is None:
            return False
        values: list[ast.expr] = [func]
        values += [v.func for v in self.assignments.get(key, ()) if isinstance(v, ast.Call)]
        for value in values:
            if isinstance(value, ast.Name) and value.id in self._local_clippers:
                if value is not func or value.id not in self.functions:
                    return True  # (a function of this file is followed where it is called)
                continue
            qual = self.imports.qualname(value)
            if qual is not None and self.project is not None and self.project.clipper(qual):
                return True
        return False

    def is_optimizer(self, key: str | None) -> bool:
        """Whether ``key`` holds an optimizer (constructed here, stepped by a scaler, or named so)."""
        return key is not None and (key in self.optimizer_keys or is_optimizer_name(key))

    def _collect_frozen_loops(self) -> None:
        for node in self.of_type(ast.For):
            it = node.iter  # type: ignore[attr-defined]
            target = node.target  # type: ignore[attr-defined]
            if not (
                isinstance(it, ast.Call)
                and isinstance(it.func, ast.Attribute)
                and it.func.attr == "parameters"
                and isinstance(target, ast.Name)
            ):
                continue
            module = dotted_key(it.func.value)
            for stmt in node.body:  # type: ignore[attr-defined]
                if (
                    module is not None
                    and isinstance(stmt, ast.Assign)
                    and any(dotted_key(t) == f"{target.id}.requires_grad" for t in stmt.targets)
                    and self.resolver.is_false(stmt.value)
                ):
                    self.frozen.add(module)

    def frozen_only(self, body: list[ast.stmt]) -> bool:
        """Whether every call in ``body`` runs a frozen module (``backbone(x)``,
        ``backbone.encode(x)``): nothing there builds a gradient of a trained weight."""
        if not self.frozen:
            return False
        calls = [n for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Call)]
        if not calls:
            return False
        for call in calls:
            key = dotted_key(call.func)
            owner = dotted_key(call.func.value) if isinstance(call.func, ast.Attribute) else None
            if key not in self.frozen and owner not in self.frozen:
                return False
        return True

    def scalers_all_disabled(self) -> bool:
        """Whether every GradScaler of the file is built with a literal ``enabled=False`` and
        every name that looks like a scaler holds one of them (none comes from elsewhere)."""
        if not self.scaler_ctors or any(
            self.resolver.scaler_enabled(c) != "no" for c in self.scaler_ctors
        ):
            return False
        if any(ctor is None for ctor in self.scaler_keys.values()):
            return False  # a parameter annotated as a scaler
        for key in self.scaler_uses:
            values = self.assignments.get(key)
            if not values or any(self.resolver.scaler_ctor(v) is None for v in values):
                return False
        return True

    def owner_of(self, node: ast.AST) -> FunctionNode | None:
        """The innermost function ``node`` is written in (``None``: module level)."""
        if self._owner_of is None:
            self._owner_of = {id(n): o for n, o in zip(self.nodes, self.owners, strict=True)}
        return self._owner_of.get(id(node))

    def framework_of(self, key: str | None) -> str | None:
        """The framework ``key`` holds an object of (built here, or named after it)."""
        if key is None:
            return None
        return self.framework_keys.get(key) or framework_of_name(key)

    def framework_clip(self, key: str | None, attr: str) -> bool:
        """Whether ``key.attr(...)`` is a framework's gradient clipping
        (``self.clip_gradients``, ``fabric.clip_gradients``, ``accelerator.clip_grad_norm_``)."""
        if key == "self":
            return attr in CLIP_METHODS["lightning"]
        framework = self.framework_of(key)
        return framework is not None and attr in CLIP_METHODS.get(framework, ())

    def is_scaled_call(self, node: ast.expr) -> bool:
        """Whether ``node`` contains a ``scaler.scale(...)`` call."""
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "scale"
                and self.is_scaler(dotted_key(sub.func.value), sub)
            ):
                return True
        return False

    def is_scaled(self, node: ast.expr) -> bool:
        """Whether ``node`` is (or holds) a loss multiplied by a scaler: ``scaler.scale(loss)``."""
        key = dotted_key(node)
        if key is not None and key in self.scaled_keys:
            return True
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and sub.func.attr == "scale"
                and self.is_scaler(dotted_key(sub.func.value), sub)
            ):
                return True
        return False


def _stub(fn: FunctionNode) -> bool:
    """Whether a function does nothing: its body, after a docstring, is ``pass``, ``...``
    or ``raise NotImplementedError``."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    if not body:
        return True
    if len(body) != 1:
        return False
    only = body[0]
    if isinstance(only, ast.Pass):
        return True
    if isinstance(only, ast.Expr) and isinstance(only.value, ast.Constant):
        return only.value.value is Ellipsis
    if isinstance(only, ast.Raise) and only.exc is not None:
        exc = only.exc.func if isinstance(only.exc, ast.Call) else only.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False
