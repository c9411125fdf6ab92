"""Pure recognisers of statement and call shapes that the flow builder asks about."""

from __future__ import annotations

import ast

from ampkit.lint.events import modulo_divisor
from ampkit.lint.names import dotted_key

__all__ = [
    "RESCALE_OPS",
    "bound_keys",
    "cast_receiver",
    "clamps_in_hook",
    "continue_guard",
    "is_grad_key",
    "loaded_keys",
    "rescales_grads",
    "runs_once",
    "scale_returns_its_argument",
    "scaled_operand",
    "terminates",
    "uses_get_scale",
]

_LEAVE = (ast.Continue, ast.Break, ast.Return, ast.Raise)
RESCALE_OPS = (ast.Div, ast.Mult)


def terminates(stmts: list[ast.stmt]) -> bool:
    """Whether a block ends by leaving (``continue``, ``break``, ``return``, ``raise``)."""
    return bool(stmts) and isinstance(stmts[-1], _LEAVE)


def runs_once(body: list[ast.stmt]) -> bool:
    """Whether a loop body always leaves at its end (``while True: ... return``): a retry
    loop that repeats only through ``continue``, not an iteration over data."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Break, ast.Raise))


def continue_guard(stmt: ast.stmt) -> str | None:
    """``n`` when ``stmt`` is ``if (i + 1) % n != 0: continue``."""
    if (
        isinstance(stmt, ast.If)
        and not stmt.orelse
        and stmt.body
        and isinstance(stmt.body[-1], ast.Continue)
    ):
        return modulo_divisor(stmt.test)
    return None


def bound_keys(target: ast.AST) -> list[str]:
    """The names and attribute chains an assignment target binds."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [k for elt in target.elts for k in bound_keys(elt)]
    if isinstance(target, ast.Starred):
        return bound_keys(target.value)
    key = dotted_key(target)
    return [key] if key is not None else []


def loaded_keys(stmts: list[ast.stmt]) -> frozenset[str]:
    """Every name and attribute chain read in a block (what an autocast region uses)."""
    found: set[str] = set()
    for stmt in stmts:
        for node in ast.walk(stmt):
            if isinstance(node, (ast.Name, ast.Attribute)):
                key = dotted_key(node)
                if key is not None:
                    found.add(key)
    return frozenset(found)


def is_grad_key(key: str | None) -> bool:
    return key is not None and "grad" in key.split(".")


def rescales_grads(call: ast.Call) -> bool:
    """``p.grad.div_(n)``, ``optimizer.multiply_grads(c)``, ``scale_grads(...)`` and alike."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    if name in ("div_", "mul_") and isinstance(func, ast.Attribute):
        return is_grad_key(dotted_key(func.value))
    lowered = name.lower()
    return "grad" in lowered and any(w in lowered for w in ("mul", "div", "scale_", "rescale"))


def cast_receiver(func: ast.expr) -> ast.Call | None:
    """The call a ``.float()`` is applied to, when that call is itself a cast."""
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Call):
        inner = func.value.func
        if isinstance(inner, ast.Attribute) and inner.attr in ("half", "bfloat16", "to", "type"):
            return func.value
    return None


def uses_get_scale(call: ast.Call) -> bool:
    """Whether a clip call's arguments use ``scaler.get_scale()`` (clipping at a scaled norm)."""
    for arg in [*call.args, *(kw.value for kw in call.keywords)]:
        for node in ast.walk(arg):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get_scale", "_get_scale_async")
            ):
                return True
    return False


def scaled_operand(node: ast.expr) -> ast.expr:
    """The loss inside ``scaler.scale(loss)`` (or the variable holding a scaled loss)."""
    for sub in ast.walk(node):
        if (
            isinstance(sub, ast.Call)
            and isinstance(sub.func, ast.Attribute)
            and sub.func.attr == "scale"
            and sub.args
        ):
            return sub.args[0]
    return node


#: tensor hooks that run during the backward pass, on the gradient as it is computed
_GRAD_HOOKS = frozenset({"register_hook", "register_post_accumulate_grad_hook"})


def clamps_in_hook(call: ast.Call) -> bool:
    """``p.register_hook(lambda grad: grad.clamp(-c, c))`` (or a lambda calling anything named
    for clamping or clipping): a hook that clips each gradient while the backward computes
    it, before any ``unscale_`` can run."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and func.attr in _GRAD_HOOKS and call.args):
        return False
    hook = call.args[0]
    if not isinstance(hook, ast.Lambda):
        return False
    for sub in ast.walk(hook.body):
        if isinstance(sub, ast.Call):
            name = (
                sub.func.attr
                if isinstance(sub.func, ast.Attribute)
                else getattr(sub.func, "id", "")
            )
            if "clamp" in name.lower() or "clip" in name.lower():
                return True
    return False


def scale_returns_its_argument(node: ast.ClassDef) -> bool:
    """Whether the class defines ``scale(self, x)`` whose body is ``return x`` (a docstring
    aside): a stand-in for a GradScaler that scales nothing."""
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "scale":
            params = stmt.args.posonlyargs + stmt.args.args
            body = [
                b
                for b in stmt.body
                if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))
            ]
            return (
                len(params) >= 2
                and len(body) == 1
                and isinstance(body[0], ast.Return)
                and isinstance(body[0].value, ast.Name)
                and body[0].value.id == params[1].arg
            )
    return False
