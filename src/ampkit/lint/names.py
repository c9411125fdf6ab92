"""Resolve names through imports and recognise the torch mixed-precision API in an AST.

Everything here is static: the linter never imports torch. A name is resolved through the
file's ``import`` statements (``import torch.cuda.amp as amp``, ``from torch.cuda.amp import
GradScaler as Scaler``) to a dotted qualified name such as ``torch.cuda.amp.GradScaler``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

__all__ = [
    "BF16",
    "FP16",
    "AutocastInfo",
    "Imports",
    "dotted_key",
    "is_deprecated",
    "is_optimizer_name",
    "is_replacement",
    "is_scaler_name",
]

FP16 = "float16"
BF16 = "bfloat16"

#: autocast entry points -> the device they imply (``None``: given as an argument).
AUTOCAST_APIS: dict[str, str | None] = {
    "torch.autocast": None,
    "torch.amp.autocast": None,
    "torch.amp.autocast_mode.autocast": None,
    "torch.cuda.amp.autocast": "cuda",
    "torch.cuda.amp.autocast_mode.autocast": "cuda",
    "torch.cpu.amp.autocast": "cpu",
    "torch.cpu.amp.autocast_mode.autocast": "cpu",
}

#: GradScaler constructors.
SCALER_APIS = frozenset(
    {
        "torch.GradScaler",
        "torch.amp.GradScaler",
        "torch.amp.grad_scaler.GradScaler",
        "torch.cuda.amp.GradScaler",
        "torch.cuda.amp.grad_scaler.GradScaler",
        "torch.cpu.amp.GradScaler",
        "torch.distributed.fsdp.ShardedGradScaler",
        "torch.distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
        # ampkit's own scaler has the GradScaler protocol (scale/unscale_/step/update)
        "ampkit.LossScaler",
        "ampkit.precision.scaler.LossScaler",
    }
)

CLIP_APIS = frozenset(
    {
        "torch.nn.utils.clip_grad_norm_",
        "torch.nn.utils.clip_grad_value_",
        "torch.nn.utils.clip_grad.clip_grad_norm_",
        "torch.nn.utils.clip_grad.clip_grad_value_",
    }
)

DTYPES: dict[str, str] = {
    "torch.float16": FP16,
    "torch.half": FP16,
    "torch.bfloat16": BF16,
    "torch.float32": "float32",
    "torch.float": "float32",
    "torch.float64": "float64",
    "torch.double": "float64",
}

#: Default autocast dtype of ``torch.autocast(device_type)`` per device.
DEFAULT_DTYPE: dict[str, str] = {"cuda": FP16, "mps": FP16, "cpu": BF16, "xpu": BF16, "hpu": BF16}

_GRAD_OFF = frozenset(
    {
        "torch.no_grad",
        "torch.inference_mode",
        "torch.autograd.no_grad",
        "torch.autograd.grad_mode.no_grad",
        "torch.autograd.grad_mode.inference_mode",
    }
)

_OLD = ("torch.cuda.amp", "torch.cpu.amp")
_NEW_EXACT = frozenset({"torch.amp", "torch.autocast", "torch.GradScaler"})


def is_deprecated(qualname: str | None) -> bool:
    """Whether a qualified name is (inside) the deprecated ``torch.cuda.amp``/``torch.cpu.amp``."""
    return qualname is not None and any(
        qualname == old or qualname.startswith(old + ".") for old in _OLD
    )


def is_replacement(qualname: str | None) -> bool:
    """Whether a qualified name is the current API (``torch.amp...``, ``torch.autocast``)."""
    return qualname is not None and (qualname in _NEW_EXACT or qualname.startswith("torch.amp."))


_SCALER_RE = re.compile(r"scaler", re.IGNORECASE)
_OPTIM_RE = re.compile(
    r"(^|_)(opt|optim|optimizer|optimiser)s?(_|$|\d)|optimi[sz]er", re.IGNORECASE
)


def dotted_key(node: ast.AST) -> str | None:
    """The textual key of a plain name or attribute chain (``self.scaler``), else ``None``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_key(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def is_scaler_name(key: str | None) -> bool:
    """Whether a variable name looks like it holds a loss scaler (``scaler``, ``self.grad_scaler``)."""
    return key is not None and bool(_SCALER_RE.search(key.rsplit(".", 1)[-1]))


def is_optimizer_name(key: str | None) -> bool:
    """Whether a variable name looks like it holds an optimizer (``optimizer``, ``opt_d``)."""
    if key is None:
        return False
    last = key.rsplit(".", 1)[-1]
    return bool(_OPTIM_RE.search(last)) and "sched" not in last.lower()


class Imports:
    """The names a module binds through ``import`` statements, mapped to qualified names.

    A name imported both from the current API and from the deprecated one (a fallback:
    ``try: from torch.amp import X`` / ``except ImportError: from torch.cuda.amp import X``)
    resolves to the current API, which is what it is on any torch that deprecates the other.
    """

    def __init__(self, nodes: list[ast.AST]) -> None:
        self.aliases: dict[str, str] = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self._bind(alias.asname, alias.name)
                    else:
                        root = alias.name.split(".", 1)[0]
                        self._bind(root, root)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self._bind(alias.asname or alias.name, f"{node.module}.{alias.name}")

    def _bind(self, name: str, qualname: str) -> None:
        previous = self.aliases.get(name)
        if previous is not None and is_deprecated(qualname) and not is_deprecated(previous):
            return
        self.aliases[name] = qualname

    def qualname(self, node: ast.AST) -> str | None:
        """The qualified name an expression refers to (``th.cuda.amp.autocast``), if known."""
        if isinstance(node, ast.Name):
            if node.id in self.aliases:
                return self.aliases[node.id]
            return "torch" if node.id == "torch" else None
        if isinstance(node, ast.Attribute):
            base = self.qualname(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        return None


@dataclass(frozen=True)
class AutocastInfo:
    """What an autocast call enables: device, dtype (``None`` when not static) and its API."""

    node: ast.AST
    api: str
    device: str | None
    dtype: str | None
    disabled: bool = False
    #: the ``enabled=`` expression, ``None`` when not given
    enabled: ast.expr | None = None


def _arg(call: ast.Call, index: int, name: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    if index < len(call.args) and not any(
        isinstance(a, ast.Starred) for a in call.args[: index + 1]
    ):
        return call.args[index]
    return None


class Resolver:
    """Evaluates the few constant expressions the rules need: dtypes, devices, flags."""

    def __init__(self, imports: Imports, constants: dict[str, ast.expr]) -> None:
        self.imports = imports
        self.constants = constants

    def _follow(self, node: ast.expr | None, depth: int = 0) -> ast.expr | None:
        while isinstance(node, ast.Name) and node.id in self.constants and depth < 5:
            node = self.constants[node.id]
            depth += 1
        return node

    def dtype(self, node: ast.expr | None) -> str | None:
        """``float16``/``bfloat16``/... when ``node`` statically names a torch dtype."""
        node = self._follow(node)
        if node is None:
            return None
        name = self.imports.qualname(node)
        return DTYPES.get(name) if name else None

    def string(self, node: ast.expr | None) -> str | None:
        """The value of a string constant (through single-assignment names)."""
        node = self._follow(node)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        return None

    def is_false(self, node: ast.expr | None) -> bool:
        """Whether ``node`` is the literal ``False``."""
        node = self._follow(node)
        return isinstance(node, ast.Constant) and node.value is False

    def autocast(self, node: ast.AST) -> AutocastInfo | None:
        """Describe ``node`` when it is an autocast call (``torch.autocast("cuda")``...)."""
        if not isinstance(node, ast.Call):
            return None
        api = self.imports.qualname(node.func)
        if api not in AUTOCAST_APIS:
            return None
        fixed = AUTOCAST_APIS[api]
        if fixed is None:
            device_node = _arg(node, 0, "device_type")
            device = self.string(device_node)
            if device is not None:
                device = device.split(":", 1)[0]
            dtype_node, enabled_node = _arg(node, 1, "dtype"), _arg(node, 2, "enabled")
        else:
            device = fixed
            enabled_node, dtype_node = _arg(node, 0, "enabled"), _arg(node, 1, "dtype")
        if dtype_node is None:
            dtype = DEFAULT_DTYPE.get(device) if device else None
        else:
            dtype = self.dtype(dtype_node)
        return AutocastInfo(node, api, device, dtype, self.is_false(enabled_node), enabled_node)

    def find_autocast(self, node: ast.AST) -> AutocastInfo | None:
        """The autocast inside an expression: a call, ``autocast() if amp else nullcontext()``,
        or autocast passed by reference (``torch.autocast``, ``partial(torch.autocast, ...)``,
        ``lambda: torch.autocast(...)``), as stored in a variable that is called later."""
        if isinstance(node, ast.Call):
            info = self.autocast(node)
            if info is None and node.args and self._is_partial(node.func):
                bound = ast.Call(node.args[0], node.args[1:], node.keywords)
                info = self.autocast(ast.copy_location(bound, node))
            return info
        if isinstance(node, ast.IfExp):
            return self.find_autocast(node.body) or self.find_autocast(node.orelse)
        if isinstance(node, ast.Lambda):
            return self.find_autocast(node.body)
        if isinstance(node, (ast.Name, ast.Attribute)):
            api = self.imports.qualname(node)
            if api in AUTOCAST_APIS:
                device = AUTOCAST_APIS[api]
                dtype = DEFAULT_DTYPE.get(device) if device else None
                return AutocastInfo(node, api, device, dtype)
        return None

    def _is_partial(self, func: ast.expr) -> bool:
        name = self.imports.qualname(func)
        return name == "functools.partial" or (isinstance(func, ast.Name) and func.id == "partial")

    def grad_mode(self, node: ast.AST) -> bool | None:
        """``False`` for a context or decorator that turns gradients off (``torch.no_grad()``,
        ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``), ``True`` for
        ``torch.enable_grad()``, ``None`` for anything else."""
        call = node if isinstance(node, ast.Call) else None
        name = self.imports.qualname(call.func if call is not None else node)
        if name in _GRAD_OFF:
            if call is not None and (call.args or call.keywords):
                flag = self._follow(call.args[0] if call.args else call.keywords[0].value)
                return False if isinstance(flag, ast.Constant) and flag.value is True else None
            return False
        if name == "torch.enable_grad":
            return True
        if name in ("torch.set_grad_enabled", "torch.autograd.set_grad_enabled"):
            if call is not None and call.args and self.is_false(call.args[0]):
                return False
        return None

    def scaler_ctor(self, node: ast.AST) -> ast.Call | None:
        """The GradScaler constructor call in ``node`` (also inside ``a if c else b``)."""
        if isinstance(node, ast.Call) and self.imports.qualname(node.func) in SCALER_APIS:
            return node
        if isinstance(node, ast.IfExp):
            return self.scaler_ctor(node.body) or self.scaler_ctor(node.orelse)
        return None

    def scaler_enabled(self, call: ast.Call) -> str:
        """``"yes"``, ``"no"`` (literal ``enabled=False``) or ``"maybe"`` (an expression)."""
        for kw in call.keywords:
            if kw.arg == "enabled":
                node = self._follow(kw.value)
                if isinstance(node, ast.Constant):
                    return "yes" if node.value else "no"
                return "maybe"
        return "yes"
