"""Resolve names through imports and recognise the torch mixed-precision API in an AST.

Everything here is static: the linter never imports torch. A name is resolved through the
file's ``import`` statements (``import torch.cuda.amp as amp``, ``from torch.cuda.amp import
GradScaler as Scaler``) to a dotted qualified name such as ``torch.cuda.amp.GradScaler``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "BF16",
    "FP16",
    "Argument",
    "AutocastInfo",
    "Imports",
    "NameLookup",
    "Wrapper",
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
        # the old spelling, deprecated but still clipping in place
        "torch.nn.utils.clip_grad_norm",
        "torch.nn.utils.clip_grad.clip_grad_norm",
    }
)

#: The last name of a clip, torch's or a project's own helper named after it
#: (``from utils.util import clip_grad_norm``).
CLIP_CALL_NAMES = frozenset(
    {"clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grad_value"}
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
            elif isinstance(node, ast.ImportFrom) and node.level:
                # relative (``from .utils import f``): ``.utils.f``, resolved by the project
                base = "." * node.level + (f"{node.module}." if node.module else "")
                for alias in node.names:
                    if alias.name != "*":
                        self._bind(alias.asname or alias.name, base + alias.name)

    def _bind(self, name: str, qualname: str) -> None:
        previous = self.aliases.get(name)
        if is_deprecated(qualname) and is_replacement(previous):
            # ``try: from torch.amp import autocast`` / ``except ImportError: from
            # torch.cuda.amp import autocast``: the current API where torch has it (a
            # device-specific module bound first, ``torch.xpu.amp``, is no such fallback)
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
class Argument:
    """One autocast argument of a wrapper: a parameter of the wrapper (``param``), or a
    value resolved where the wrapper is written (``dtypes``, ``text``, ``false``)."""

    param: str | None = None
    dtypes: frozenset[str] = frozenset()
    text: str | None = None
    false: bool = False
    given: bool = False


@dataclass(frozen=True)
class Wrapper:
    """A function that makes an autocast context (see the module docstring)."""

    api: str
    params: tuple[str, ...]
    defaults: tuple[tuple[str, Argument], ...]
    device: Argument
    dtype: Argument
    enabled: Argument
    fixed_device: str | None = None


class NameLookup(Protocol):
    """What the names imported from the other files of a linted tree hold
    (:class:`~ampkit.lint.project.ProjectView`)."""

    def wrapper(self, qualname: str) -> Wrapper | None:
        """The autocast wrapper ``qualname`` names, if it is one."""

    def dtypes(self, qualname: str) -> frozenset[str]:
        """The dtypes a module-level name may hold (empty: none known)."""


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
    #: every dtype the autocast may run in (``torch.float16 if fp16 else torch.bfloat16``)
    dtypes: frozenset[str] = frozenset()


def call_argument(call: ast.Call, index: int, name: str) -> ast.expr | None:
    """The argument ``name`` of ``call``: given by keyword, or at position ``index`` when no
    ``*args`` comes before it; None when not given."""
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

    def __init__(
        self,
        imports: Imports,
        constants: dict[str, ast.expr],
        project: NameLookup | None = None,
    ) -> None:
        self.imports = imports
        self.constants = constants
        self.project = project
        #: module-level functions of this file that make an autocast context
        self.wrappers: dict[str, Wrapper] = {}

    def _follow(self, node: ast.expr | None, depth: int = 0) -> ast.expr | None:
        while isinstance(node, ast.Name) and node.id in self.constants and depth < 5:
            node = self.constants[node.id]
            depth += 1
        return node

    def dtype(self, node: ast.expr | None) -> str | None:
        """``float16``/``bfloat16``/... when ``node`` statically names a torch dtype."""
        found = self.dtypes(node)
        return next(iter(found)) if len(found) == 1 else None

    def dtypes(self, node: ast.expr | None, depth: int = 0) -> frozenset[str]:
        """Every torch dtype ``node`` may name: through single-assignment names, both arms of
        ``a if c else b``, the values of ``{...}[key]``, and module-level names of the
        linted tree (``from config import DTYPE``). Empty when none is known."""
        node = self._follow(node)
        if node is None or depth > 4:
            return frozenset()
        if isinstance(node, ast.IfExp):
            return self.dtypes(node.body, depth + 1) | self.dtypes(node.orelse, depth + 1)
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict):
            found: frozenset[str] = frozenset()
            for value in node.value.values:
                found |= self.dtypes(value, depth + 1)
            return found
        name = self.imports.qualname(node)
        if name is None:
            return frozenset()
        if name in DTYPES:
            return frozenset({DTYPES[name]})
        if self.project is not None and not name.startswith("torch"):
            return self.project.dtypes(name)
        return frozenset()

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
            wrapper = self._wrapper(node.func, api)
            return self._through(wrapper, node) if wrapper is not None else None
        fixed = AUTOCAST_APIS[api]
        if fixed is None:
            device_node = call_argument(node, 0, "device_type")
            device = self.string(device_node)
            if device is not None:
                device = device.split(":", 1)[0]
            dtype_node, enabled_node = (
                call_argument(node, 1, "dtype"),
                call_argument(node, 2, "enabled"),
            )
        else:
            device = fixed
            enabled_node, dtype_node = (
                call_argument(node, 0, "enabled"),
                call_argument(node, 1, "dtype"),
            )
        if dtype_node is None:
            default = DEFAULT_DTYPE.get(device) if device else None
            dtypes = frozenset({default}) if default else frozenset()
        else:
            dtypes = self.dtypes(dtype_node)
        dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
        return AutocastInfo(
            node, api, device, dtype, self.is_false(enabled_node), enabled_node, dtypes
        )

    def _wrapper(self, func: ast.expr, qualname: str | None) -> Wrapper | None:
        """The autocast wrapper a call's function is (this file's, or the tree's)."""
        if isinstance(func, ast.Name) and func.id in self.wrappers and qualname is None:
            return self.wrappers[func.id]
        if qualname is not None and self.project is not None:
            return self.project.wrapper(qualname)
        return None

    def _through(self, wrapper: Wrapper, call: ast.Call) -> AutocastInfo | None:
        """What a call of an autocast wrapper enables: its own arguments fill the parameters
        the wrapper passes on to autocast."""
        if any(isinstance(a, ast.Starred) for a in call.args):
            return None
        bound: dict[str, ast.expr] = dict(zip(wrapper.params, call.args, strict=False))
        bound.update({kw.arg: kw.value for kw in call.keywords if kw.arg is not None})
        defaults = dict(wrapper.defaults)

        def value(arg: Argument) -> tuple[frozenset[str], str | None, bool, bool, ast.expr | None]:
            if arg.param is not None:
                given = bound.get(arg.param)
                if given is not None:
                    return self.dtypes(given), self.string(given), self.is_false(given), True, given
                arg = defaults.get(arg.param, arg)
                if arg.param is not None:
                    return frozenset(), None, False, False, None
            return arg.dtypes, arg.text, arg.false, arg.given, None

        _, device_text, _, _, _ = value(wrapper.device)
        device = wrapper.fixed_device or (device_text.split(":", 1)[0] if device_text else None)
        dtypes, _, _, dtype_given, _ = value(wrapper.dtype)
        if not dtype_given:
            default = DEFAULT_DTYPE.get(device) if device else None
            dtypes = frozenset({default}) if default else frozenset()
        _, _, disabled, _, enabled = value(wrapper.enabled)
        dtype = next(iter(dtypes)) if len(dtypes) == 1 else None
        return AutocastInfo(call, wrapper.api, device, dtype, disabled, enabled, dtypes)

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
                dtypes = frozenset({dtype}) if dtype else frozenset()
                return AutocastInfo(node, api, device, dtype, dtypes=dtypes)
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
