"""The interface of an export format and the registry of formats by name.

A format turns the flat fp32 model (:class:`~ampkit.deploy.signature.FlatModel`) into the
serialized bytes of a low-precision file (:meth:`ExportFormat.convert`) and runs those bytes the
way a server would, for the parity check (:meth:`ExportFormat.run_parity`). The exporter
(:func:`ampkit.export`) does everything else: signature, fp32 reference, modules kept in fp32,
the verdict, the atomic write. A new format is one module in this package with a class
decorated with :func:`register`, imported once in ``formats/__init__.py``.

Nothing here imports torch at import time (the command line builds ``--format``'s choices from
the registry without it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import numpy as np

    from ampkit.deploy.parity import ParityReport, Tolerance
    from ampkit.deploy.signature import FlatModel, Signature

__all__ = ["FORMATS", "Converted", "ExportFormat", "register"]


@dataclass(frozen=True)
class Converted:
    """What :meth:`ExportFormat.convert` made.

    Attributes:
        data: the serialized file, as written when parity passes.
        fp32_size: size of the same model exported in fp32, when the format knows it (else None).
        fp32_nodes: graph nodes kept in fp32 by reason (formats without such a graph: empty).
        notes: what the conversion changed or could not do, one sentence each.
        unmatched: ``keep_fp32`` names that match nothing the format can keep in fp32 (no
            node of the graph); they are not reported as kept.
    """

    data: bytes
    fp32_size: int | None = None
    fp32_nodes: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    unmatched: tuple[str, ...] = ()


class ExportFormat:
    """One output format of :func:`ampkit.export`.

    Subclasses set ``name`` (the ``format=`` value and ``--format`` choice), ``suffix`` (the
    usual file suffix), ``summary`` (one line for ``--help``) and ``requires`` (the optional
    packages the format imports, installed by ``pip install 'ampkit[export]'``), and implement
    :meth:`convert` and :meth:`run_parity`.
    """

    name: ClassVar[str] = ""
    suffix: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    requires: ClassVar[tuple[str, ...]] = ()

    def convert(
        self,
        flat: FlatModel,
        signature: Signature,
        output_names: Sequence[str],
        precision: str,
        keep_fp32: list[str],
        keep_io_types: bool,
        dynamic_shapes: Any,
    ) -> Converted:
        """Capture ``flat`` on ``signature.inputs`` and make the file's bytes in ``precision``
        (``fp16``, ``bf16`` or ``fp32``), keeping the modules ``keep_fp32`` in fp32.

        Raises:
            MissingDependencyError: a package of :attr:`requires` is not installed.
            ExportError: the model cannot be captured or converted (the message names why).
        """
        raise NotImplementedError

    def run_parity(
        self,
        data: bytes,
        precision: str,
        input_names: Sequence[str],
        output_names: Sequence[str],
        batches: Sequence[Sequence[Any]],
        reference: list[list[np.ndarray]],
        tolerance: Tolerance,
        compared: Sequence[Sequence[np.ndarray | None]] | None = None,
        *,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> tuple[tuple[ParityReport, ...], list[str]]:
        """Run the serialized ``data`` on ``batches`` and compare it with the fp32
        ``reference``: one parity report per runtime, and notes. ``compared`` (per batch and
        output; None: everything) marks the positions that are not padding
        (:func:`~ampkit.deploy.signature.padding_positions`), passed on to
        :func:`~ampkit.deploy.parity.compare`. ``progress("parity batches", done, total)`` is
        called after each batch the runtime ran.

        Raises:
            MissingDependencyError: the runtime is not installed.
            ExportError: the runtime refuses the file (the message names the node).
        """
        raise NotImplementedError


#: ``format name -> format class``, filled by :func:`register`.
FORMATS: dict[str, type[ExportFormat]] = {}


def register(cls: type[ExportFormat]) -> type[ExportFormat]:
    """Class decorator adding a format to :data:`FORMATS` (names must be unique)."""
    if not cls.name or cls.name in FORMATS:
        raise ValueError(
            f"export format {cls.__name__} has an empty or duplicate name {cls.name!r}"
        )
    FORMATS[cls.name] = cls
    return cls
