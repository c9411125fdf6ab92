"""The methods a class has: its own, those of base classes written in the same file and,
through the project index, those of base classes written in other files of the linted tree.

A trainer is often split over files: the backward and the optimizer step live in a base
class (``engine/base.py``), the training loop in a subclass (``train.py``) that calls
``self.backward(loss)`` and ``self.optimizer_step()``. :func:`class_methods` follows the
class bases, by name in the file and through the imports the
:class:`~ampkit.lint.project.ProjectView` resolves, so that the flow of the subclass
inlines the inherited methods; each inherited method is analysed with the
:class:`~ampkit.lint.facts.FileFacts` of the file it is written in (its own imports and
bindings). A base file is parsed at most once per process and index, and only when a
class of another file names one of its classes as a base.
"""

from __future__ import annotations

import ast
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ampkit.lint.discovery import MAX_FILE_BYTES, read_source
from ampkit.lint.facts import FileFacts, FunctionNode
from ampkit.lint.walk import walk_tree

__all__ = ["Methods", "class_methods"]

#: how many base classes deep the methods are followed
_MAX_DEPTH = 4
#: base files kept parsed per index (one process)
_CACHE_LIMIT = 64


@dataclass
class Methods:
    """The methods of a class by name, and the facts of the file each inherited one from
    another file is written in (by ``id`` of its function node)."""

    table: dict[str, FunctionNode] = field(default_factory=dict)
    written_in: dict[int, FileFacts] = field(default_factory=dict)


def class_methods(
    cls: ast.ClassDef, classes: dict[str, ast.ClassDef], facts: FileFacts, depth: int = 0
) -> Methods:
    """The methods of ``cls`` (written in the file of ``facts``, whose module-level classes
    are ``classes``), including those inherited from base classes in this file and in the
    other files of the project (when ``facts`` has one)."""
    found = Methods()
    other_files = depth > 0 or _calls_unknown_self_methods(cls, classes)
    if depth < _MAX_DEPTH:
        for base in reversed(cls.bases):
            parent = classes.get(base.id) if isinstance(base, ast.Name) else None
            inherited: Methods | None
            if parent is not None:
                inherited = (
                    class_methods(parent, classes, facts, depth + 1) if parent is not cls else None
                )
            elif other_files:
                inherited = _other_file(base, facts, depth)
            else:
                inherited = None
            if inherited is not None:
                found.table.update(inherited.table)
                found.written_in.update(inherited.written_in)
    for item in cls.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.table[item.name] = item
            found.written_in.pop(id(item), None)
    return found


def _calls_unknown_self_methods(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> bool:
    """Whether a method of ``cls`` calls ``self.name(...)`` for a name that neither the class
    nor a base class of its file defines (only then can another file add to its flows)."""
    called = {
        node.func.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "self"
    }
    if not called:
        return False
    known: set[str] = set()
    stack, seen = [cls], set()
    while stack:
        klass = stack.pop()
        if id(klass) in seen:
            continue
        seen.add(id(klass))
        known.update(
            item.name
            for item in klass.body
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
        )
        stack.extend(
            classes[b.id] for b in klass.bases if isinstance(b, ast.Name) and b.id in classes
        )
    return not called <= known


def _other_file(base: ast.expr, facts: FileFacts, depth: int) -> Methods | None:
    """The methods of a base class written in another file of the project, if it is one."""
    view = facts.project
    if view is None:
        return None
    qualname = facts.imports.qualname(base)
    if qualname is None:
        return None
    source = view.class_source(qualname)
    if source is None:
        return None
    path, module, name = source
    loaded = _load(facts, path, module)
    if loaded is None:
        return None
    there, classes = loaded
    cls = classes.get(name)
    if cls is None:
        return None
    inner = class_methods(cls, classes, there, depth + 1)
    for fn in inner.table.values():
        inner.written_in.setdefault(id(fn), there)
    return inner


def _load(
    facts: FileFacts, path: str, module: str
) -> tuple[FileFacts, dict[str, ast.ClassDef]] | None:
    """The facts and module-level classes of another file of the project (parsed once)."""
    view = facts.project
    if view is None:
        return None
    cache = view.index.cache
    if path in cache:
        return cache[path]  # type: ignore[return-value]
    loaded: tuple[FileFacts, dict[str, ast.ClassDef]] | None = None
    try:
        text, _ = read_source(Path(path), MAX_FILE_BYTES)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(text, filename=path)
        there = FileFacts(tree, walk_tree(tree), view.index.view(path, module))
        classes = {s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}
        loaded = there, classes
    except (OSError, SyntaxError, UnicodeDecodeError, LookupError, ValueError, RecursionError):
        loaded = None  # that file is reported on its own (AMP000); here it adds nothing
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()
    cache[path] = loaded
    return loaded
