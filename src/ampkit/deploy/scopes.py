"""Which module of the PyTorch model an ONNX node came from.

torch's dynamo exporter records, on every node it emits, the module path it was traced in:
the metadata ``pkg.torch.onnx.name_scopes`` holds the list ``['', 'model', 'model.encoder',
'model.encoder.layer.0', ..., 'mul_2']`` (the wrapper, each enclosing module's path from the
root, then the FX node's own name). The paths are relative to the exported module, which is
:class:`~ampkit.deploy.signature.FlatModel` (``model.`` before every path of the user's model).
Nodes that later passes add (the fp16 converter's casts) carry no metadata; they are placed by
the node they cast for (:func:`module_of`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

__all__ = ["SCOPES_KEY", "module_of", "module_of_nodes", "modules_matching"]

#: The node metadata key holding the module path (torch 2.5 to 2.13 write this key).
SCOPES_KEY = "pkg.torch.onnx.name_scopes"


def _scopes(node: Any, prefix: str) -> tuple[str, ...]:
    for prop in node.metadata_props:
        if prop.key == SCOPES_KEY:
            try:
                scopes = list(ast.literal_eval(prop.value))
            except (ValueError, SyntaxError):
                return ()
            return tuple(str(s)[len(prefix) :] for s in scopes if str(s).startswith(prefix))
    return ()


def module_of_nodes(model: Any, wrapper: str = "model") -> dict[str, tuple[str, ...]]:
    """``{node name: module paths, outermost first}`` from the exporter's name scopes.

    Paths are relative to the exported model (the ``wrapper.`` prefix is removed); a node
    outside any submodule, or without the metadata, maps to ``()``.
    """
    prefix = f"{wrapper}."
    return {node.name: _scopes(node, prefix) for node in model.graph.node}


def module_of(model: Any, node_name: str, wrapper: str = "model") -> str:
    """The innermost module path of node ``node_name`` (``''``: none known).

    A node without scopes (a cast a later pass inserted) takes the module of the node that
    produces its first input, else of the first node that reads its output.
    """
    scopes = module_of_nodes(model, wrapper)
    own = scopes.get(node_name, ())
    if own:
        return own[-1]
    nodes = {node.name: node for node in model.graph.node}
    node = nodes.get(node_name)
    if node is None:
        return ""
    producers = {out: n.name for n in model.graph.node for out in n.output}
    for name in node.input:
        found = scopes.get(producers.get(name, ""), ())
        if found:
            return found[-1]
    for other in model.graph.node:
        if any(out in other.input for out in node.output) and scopes.get(other.name):
            return scopes[other.name][-1]
    return ""


def modules_matching(scopes: Sequence[str], module: str) -> bool:
    """Whether a node with ``scopes`` belongs to ``module`` (the module or one inside it)."""
    return any(s == module or s.startswith(f"{module}.") for s in scopes)
