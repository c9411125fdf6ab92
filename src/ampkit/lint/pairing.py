"""Pairings decided by flags and configs: can a bfloat16 autocast meet an enabled GradScaler,
can a float16 autocast train with no scaler, and under which condition?

The question is answered by running the few assignments that decide it under every
combination of the values they read and that the code does not decide itself (a flag such as
``use_amp``, a config field such as ``cfg.amp_bf16``, an option such as ``args.dtype``):

* a name is judged by the binding that reaches the place it is read, in its own scope
  (``scaler = GradScaler()`` and later ``scaler = GradScaler("cuda")``; ``if x: scaler =
  GradScaler() else: scaler = None``): the last binding before it whose enclosing
  conditions hold; a ``self`` attribute not bound before in the method by the one other method
  of the class that binds it (bound in several, it is free), a name of another file of the tree by
  that module's module-level bindings (also inside a module-level ``if``; not those made
  inside its functions);
* a value the code does not decide is a free *atom*, named by its last part (``self.opt.
  use_amp`` and ``args.use_amp`` are both `use_amp`). Its possible values are the choices of
  an ``add_argument`` option of that name in the tree (``choices=`` only: a closed set),
  else the constants the file compares it with or looks it up by (plus the option's
  default, plus "another value"), else true and false; a config field annotated
  ``Literal[...]`` gives its choices as an option does, and the torch dtypes the tree's
  own calls pass it by keyword (``fit(..., amp_dtype=torch.bfloat16)``) or the file binds
  to a name of it (``cfg.amp_dtype = torch.bfloat16``) are values of it too.

An answer is ``bad`` with the smallest condition found (``when `use_amp` is true``),
``never`` (no combination makes it: ``GradScaler(enabled=(amp_dtype == torch.float16))``),
or ``unknown`` (a value that cannot be followed, or too many combinations), in which case
the rules keep their single-value judgement.
"""

from __future__ import annotations

import ast

from ampkit.lint.events import Event
from ampkit.lint.names import AUTOCAST_APIS, BF16, DEFAULT_DTYPE, DTYPES, call_argument, dotted_key
from ampkit.lint.scopes import atom_name, item_key, parse_key
from ampkit.lint.solver import (
    MISSING,
    OTHER,
    Answer,
    Dtype,
    ScalerValue,
    Solver,
    Table,
    Unknown,
    Where,
    arm_tests,
    truth,
)

__all__ = ["Answer", "Pairing"]


class Pairing(Solver):
    """The pairing questions of one analysed file (built on first use, see the module doc)."""

    # -- the questions ------------------------------------------------------------------
    def scaler_with_bf16(self, regions: list[Event], use: Event) -> Answer:
        """Can ``use`` (a scaler call) scale a loss computed under one of ``regions`` when
        that region runs in bfloat16 and the scaler is enabled?"""
        where_use = self._where(use.node)
        key = use.obj
        self._dtype_atoms = self._shared_dtype_atoms(regions, key)

        def bad() -> bool:
            if key is None or where_use is None or not self._reached(where_use):
                return False
            if self.opaque(key, where_use):
                # handed back by a call (``optimizer, scaler = init_opt(...)``): a scaler
                # whose ``scale`` runs here is not None, and nothing says it is disabled
                scaler: object = ScalerValue(True)
            else:
                scaler = self._lookup(key, where_use)
            if scaler is None or scaler is False:
                return False
            if not isinstance(scaler, ScalerValue):
                raise Unknown(key)
            if not scaler.enabled:
                return False
            dtypes = [self._region_dtype(a) for a in regions]
            live = [d for d in dtypes if d is not None]
            return bool(live) and all(d == BF16 for d in live)

        try:
            return self.solve(bad)
        finally:
            self._dtype_atoms = frozenset()

    def scaler_on_bf16_flag(self, stmt: ast.stmt, ctor: ast.Call) -> Answer:
        """Is the GradScaler ``ctor`` (built by ``stmt``) enabled when a free value says
        bfloat16: a flag named for it (``use_bf16``, ``args.bf16``) true, or an option holding
        ``"bf16"``/``"bfloat16"`` or torch.bfloat16, with no flag named for float16 true
        (``GradScaler(enabled=True) if cfg.use_fp16 or cfg.use_bf16 else None``)?"""
        where = self._where(ctor)
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else ctor
        if where is None or value is None:
            return Answer("unknown")

        def bad() -> bool:
            if not self._reached(where):
                return False
            scaler = self._eval(value, where)
            if not isinstance(scaler, ScalerValue) or not scaler.enabled:
                return False
            said = {a: self._assignment[a] for a in self._read if a in self._assignment}
            if any(_names(a, _FP16_WORDS) and truth(v) for a, v in said.items()):
                return False
            return any(_says_bf16(a, v) for a, v in said.items())

        return self.solve(bad)

    def _shared_dtype_atoms(self, regions: list[Event], key: str | None) -> frozenset[str]:
        """The names read both by an autocast's ``dtype=`` and by the ``enabled=`` of the
        scaler ``key`` (``GradScaler(enabled=amp_dtype is not None)`` next to
        ``autocast(dtype=amp_dtype)``): the scaler is on for every dtype, bfloat16 included,
        so those names range over the torch dtypes too."""
        ctor = self.facts.scaler_keys.get(key) if key is not None else None
        enabled = call_argument(ctor, 99, "enabled") if ctor is not None else None
        if enabled is None:
            return frozenset()
        read = self._names_read(enabled, follow=True)
        shared: set[str] = set()
        for region in regions:
            call = getattr(region.extra.get("info"), "node", None)
            if isinstance(call, ast.Call):
                dtype = call_argument(call, 1, "dtype")
                for value in _values(dtype):
                    shared |= read & self._names_read(value, follow=False)
        return frozenset(shared)

    def _names_read(self, node: ast.expr, follow: bool) -> set[str]:
        """The atom names of the names and attribute chains in ``node`` (with ``follow``,
        also in the values bound to a plain name in the file: ``enable = dtype is not
        None``)."""
        found: set[str] = set()
        for sub in ast.walk(node):
            if isinstance(sub, (ast.Name, ast.Attribute)) and dotted_key(sub) is not None:
                found.add(atom_name(sub))
                if follow and isinstance(sub, ast.Name):
                    for value in self.facts.assignments.get(sub.id, ())[:4]:
                        found |= self._names_read(value, follow=False)
        return found

    def fp16_on_cpu(self, call: ast.Call) -> Answer:
        """Can the autocast ``call`` run enabled in float16 on the CPU (its device and dtype
        read from flags, a device test, or a dict passed as ``**kwargs``)?"""
        return self.solve(lambda: self._cpu_fp16(call))

    def _cpu_fp16(self, call: ast.Call) -> bool:
        where = self._where(call)
        api = self.facts.imports.qualname(call.func)
        if where is None or api not in AUTOCAST_APIS or not self._reached(where):
            return False
        stmt = self._statement(call)
        guards = arm_tests(stmt, call) if stmt is not None else []
        if not self._tests_hold(tuple(guards), where):
            return False  # ``nullcontext() if device == "cpu" else torch.autocast(...)``
        fixed = AUTOCAST_APIS[api]
        places = (
            (("enabled", 0), ("dtype", 1))
            if fixed
            else (("device_type", 0), ("dtype", 1), ("enabled", 2))
        )
        values: dict[str, object] = {}
        for name, index in places:
            read = len(self._read)
            values[name] = self._argument(call, index, name, where)
            if name == "device_type" and any("is_available" in atom for atom in self._read[read:]):
                # ``"cuda" if torch.cuda.is_available() else "cpu"``: the CPU is the
                # fallback of a machine without a GPU, not a device chosen for fp16
                return False
        enabled = values.get("enabled", MISSING)
        if enabled is not MISSING and not truth(enabled):
            return False
        device = fixed if fixed else values["device_type"]
        if not isinstance(device, str):
            raise Unknown("device")
        if device.split(":", 1)[0] != "cpu":
            return False
        dtype = values["dtype"]
        if dtype is MISSING or dtype is None:
            return False  # the CPU default, bfloat16
        if isinstance(dtype, str) and f"torch.{dtype}" in DTYPES:
            dtype = Dtype(DTYPES[f"torch.{dtype}"])
        if not isinstance(dtype, Dtype):
            raise Unknown("dtype")
        return dtype.name == "float16"

    def _argument(self, call: ast.Call, index: int, name: str, where: Where) -> object:
        """The value of an argument of ``call``: given by position or keyword, or a key of a
        dict passed as ``**kwargs`` (its literal, and ``kwargs["name"] = ...`` after it);
        ``MISSING`` when not given."""
        node = call_argument(call, index, name)
        if node is not None:
            return self._eval(node, where)
        for kw in call.keywords:
            key = dotted_key(kw.value) if kw.arg is None else None
            if key is None:
                continue
            item = item_key(ast.Subscript(parse_key(key), ast.Constant(name)))
            if item is not None and any(
                b.scope is where.scope and b.pos < where.pos
                for b in where.source.by_key.get(item, ())
            ):
                bound = self._bound_item(item, where)
                if bound is not MISSING:
                    return bound
            table = self._eval(kw.value, where)
            if isinstance(table, Table):
                for constant, value in table.entries:
                    if constant == name:
                        return self._eval(value, table.where)
                return MISSING
            raise Unknown(key)
        return MISSING

    def _bound_item(self, item: str, where: Where) -> object:
        """The value of the last ``kwargs["name"] = ...`` that reaches ``where``."""
        for binding in reversed(where.source.by_key.get(item, ())):
            if binding.scope is not where.scope or binding.pos >= where.pos:
                continue
            at = Where(where.source, binding.scope, binding.pos)
            if self._tests_hold(binding.tests, at) and binding.value is not None:
                return self._eval(binding.value, at)
        return MISSING

    def fp16_possible(self, region: Event) -> Answer:
        """Can ``region`` run enabled in float16?"""
        return self.solve(lambda: self._region_dtype(region) == "float16")

    # -- search ----------------------------------------------------------------------------
    def _region_dtype(self, region: Event) -> str | None:
        """The dtype an autocast region runs in (``None``: not entered, or disabled)."""
        info = region.extra.get("info")
        where = self._where(region.node)
        if where is None or not self._reached(where):
            return None
        call = getattr(info, "node", None)
        api = self.facts.imports.qualname(call.func) if isinstance(call, ast.Call) else None
        if not isinstance(call, ast.Call) or api not in AUTOCAST_APIS:
            dtypes: frozenset[str] = getattr(info, "dtypes", frozenset())
            if len(dtypes) == 1 and not getattr(info, "enabled", None):
                return str(next(iter(dtypes)))
            raise Unknown("autocast")
        at = self._where(call) or where
        fixed = AUTOCAST_APIS[api]
        if fixed is None:
            dtype_node = call_argument(call, 1, "dtype")
            enabled_node = call_argument(call, 2, "enabled")
        else:
            enabled_node = call_argument(call, 0, "enabled")
            dtype_node = call_argument(call, 1, "dtype")
        if enabled_node is not None and not truth(self._eval(enabled_node, at)):
            return None
        if dtype_node is None:
            read = len(self._read)
            device: object = fixed
            if fixed is None:
                device = self._eval_or(call_argument(call, 0, "device_type"), at)
            if not isinstance(device, str):
                raise Unknown("device")
            device = device.split(":", 1)[0]
            if len(self._read) > read and device != "cuda":
                # a device chosen at run time: off CUDA, a CUDA GradScaler disables itself
                return None
            return DEFAULT_DTYPE.get(device)
        value = self._eval(dtype_node, at)
        if isinstance(value, Dtype):
            return value.name
        if isinstance(value, str) and f"torch.{value}" in DTYPES:
            return DTYPES[f"torch.{value}"]
        if value is OTHER or value is None:
            return "unknown"
        raise Unknown("dtype")


def _values(node: ast.expr | None) -> list[ast.expr]:
    """The expressions ``node`` can evaluate to, through conditional arms (``amp_dtype``, and
    both arms of ``a if test else b``), leaving out the tests: a name compared with a
    constant (``mode == "bf16"``) holds that constant, not a dtype."""
    if node is None:
        return []
    if isinstance(node, ast.IfExp):
        return [*_values(node.body), *_values(node.orelse)]
    return [node]


_BF16_WORDS = frozenset({"bf16", "bfloat16"})
_FP16_WORDS = frozenset({"fp16", "float16", "half"})


def _names(atom: str, words: frozenset[str]) -> bool:
    """Whether the atom's last name is made of one of ``words`` (``use_bf16``, ``bf16``)."""
    return bool(words & set(atom.rsplit(".", 1)[-1].lower().split("_")))


def _says_bf16(atom: str, value: object) -> bool:
    if isinstance(value, Dtype):
        return value.name == BF16
    if isinstance(value, str):
        return bool(_BF16_WORDS & set(value.lower().replace("-", "_").split("_")))
    return value is True and _names(atom, _BF16_WORDS)
