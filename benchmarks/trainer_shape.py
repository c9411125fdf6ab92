"""The Trainer's shape: its instance attributes, the length of ``__init__``, and the hops of one
checkpoint save.

* attributes: ``vars(trainer)`` after ``fit`` (every attribute the object holds by then);
* ``__init__``: the lines of ``Trainer.__init__`` in the source, signature and docstring
  included (``ast``: ``end_lineno - lineno + 1``);
* hops of one save: every call of a function of ``ampkit`` below the Trainer's call of the
  loop's first checkpoint save (full layout, one process, ``sys.setprofile``), reported as
  the distinct functions (stops; comprehensions and lambdas count as part of their function)
  and files it passes through, and the crossings into ``ampkit.checkpoint`` (layer 2) from
  the trainer's layer: each call made by a function of ``ampkit.trainer`` into a function of
  ``ampkit.checkpoint`` is one trip down and back up.

    python benchmarks/trainer_shape.py            # a table
    python benchmarks/trainer_shape.py --json     # the same, as JSON
    python benchmarks/trainer_shape.py --trace    # and the calls of one save, in order
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import sys
import tempfile
import types
from pathlib import Path
from typing import Any

import torch
from torch import nn

import ampkit
from ampkit.trainer import trainer as trainer_module


def init_lines() -> int:
    """Lines of ``Trainer.__init__`` in its source file."""
    tree = ast.parse(Path(inspect.getfile(trainer_module)).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return (item.end_lineno or item.lineno) - item.lineno + 1
    raise LookupError("Trainer.__init__")


def _trainer(folder: Path) -> ampkit.Trainer:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    return ampkit.Trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        loss_fn=nn.functional.mse_loss,
        max_steps=2,
        precision="fp32",
        device="cpu",
        checkpoint=ampkit.CheckpointConfig(folder, every=1, keep_last=2, layout="full"),
        logging=ampkit.LoggingConfig(progress_bar=False),
    )


def _where(code: types.CodeType, root: Path) -> str | None:
    try:
        return Path(code.co_filename).resolve().relative_to(root).as_posix()
    except ValueError:
        return None


#: Where one save of the loop starts: the Trainer's call of it (before and after the
#: Checkpointer took the decisions over).
_ENTRIES = ("Trainer.save_checkpoint", "Checkpointer.maybe_save")


def _render(chain: list[tuple[int, str]]) -> list[str]:
    """The calls as an indented tree, comprehensions and lambdas folded into their function,
    and a call repeated in a row with the same calls below it shown once, with ``xN``."""
    # (name, children): a comprehension's callees become its function's
    root: tuple[str, list] = ("", [])
    path: list[tuple[int, tuple[str, list]]] = [(-1, root)]
    for depth, name in chain:
        while path[-1][0] >= depth:
            path.pop()
        if name.rpartition(".")[2].startswith("<"):
            path.append((depth, path[-1][1]))  # its callees go to the enclosing function
            continue
        node: tuple[str, list] = (name, [])
        path[-1][1][1].append(node)
        path.append((depth, node))

    def lines(node: tuple[str, list], indent: int) -> list[str]:
        out = [f"{'  ' * indent}{node[0]}"]
        children = [lines(child, indent + 1) for child in node[1]]
        at = 0
        while at < len(children):
            times = 1
            while at + times < len(children) and children[at + times] == children[at]:
                times += 1
            first, *rest = children[at]
            out += [first + (f"  x{times}" if times > 1 else ""), *rest]
            at += times
        return out

    return lines(root, -1)[1:]


def save_hops() -> dict[str, Any]:
    """Trace the first checkpoint save of a ``fit`` (step 1 of 2, ``every=1``): every call of
    an ``ampkit`` function made below the Trainer's call of the save."""
    root = Path(ampkit.__file__).resolve().parent.parent
    data = [(torch.randn(4, 8), torch.randn(4, 1))] * 3
    calls: list[tuple[str | None, str, str]] = []  # (caller file, callee file, callee name)
    chain: list[tuple[int, str]] = []  # every call in order: (depth below the entry, name)
    entry: list[types.FrameType] = []

    def depth(frame: types.FrameType) -> int | None:
        """How many frames ``frame`` lies below the entry's (None: not below it)."""
        back: types.FrameType | None = frame
        below = 0
        while back is not None:
            if back is entry[0]:
                return below
            back, below = back.f_back, below + 1
        return None

    def profile(frame: types.FrameType, event: str, _arg: object) -> None:
        if event != "call":
            return
        where = _where(frame.f_code, root)
        if where is None or not where.startswith("ampkit/"):
            return
        name = frame.f_code.co_qualname
        if not entry:
            if name not in _ENTRIES:
                return
            entry.append(frame)
        below = depth(frame)
        if below is None:
            sys.setprofile(None)  # the first save is over
            return
        back = frame.f_back
        caller = _where(back.f_code, root) if back is not None else None
        calls.append((caller, where, name))
        chain.append((below, f"{where}:{name}"))

    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(Path(tmp) / "ckpt")
        sys.setprofile(profile)
        try:
            trainer.fit(data)
        finally:
            sys.setprofile(None)
        attributes = sorted(vars(trainer))
        trainer.close()
    # comprehensions and lambdas are parts of their function, not stops of their own
    stops = sorted({(w, n) for _, w, n in calls if not n.rpartition(".")[2].startswith("<")})
    down = [
        (caller, where, name)
        for caller, where, name in calls
        if caller is not None
        and caller.startswith("ampkit/trainer/")
        and where.startswith("ampkit/checkpoint/")
    ]
    return {
        "attributes": attributes,
        "stops": len(stops),
        "files": len({where for where, _ in stops}),
        "crossings": len(down),
        "crossing_calls": sorted({f"{c} -> {w}:{n}" for c, w, n in down}),
        "stop_names": [f"{w}:{n}" for w, n in stops],
        "chain": _render(chain),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--trace", action="store_true", help="also print the calls of one save, in order"
    )
    args = parser.parse_args()
    hops = save_hops()
    report = {
        "trainer_attributes": len(hops["attributes"]),
        "init_lines": init_lines(),
        "save_stops": hops["stops"],
        "save_files": hops["files"],
        "save_crossings_into_checkpoint": hops["crossings"],
        "attributes": hops["attributes"],
        "crossing_calls": hops["crossing_calls"],
        "stop_names": hops["stop_names"],
        **({"chain": hops["chain"]} if args.trace else {}),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key in ("trainer_attributes", "init_lines", "save_stops", "save_files"):
        print(f"{key:32} {report[key]}")
    print(f"{'save_crossings_into_checkpoint':32} {report['save_crossings_into_checkpoint']}")
    for line in report["crossing_calls"]:
        print(f"  {line}")
    if args.trace:
        print("calls of one save, in order (indent: depth below the entry):")
        for line in report["chain"]:
            print(f"  {line}")


if __name__ == "__main__":
    main()
