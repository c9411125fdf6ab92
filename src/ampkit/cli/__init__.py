"""The ``ampkit`` command line: thin wrappers over the library.

Each subcommand lives in a module of its own and imports torch only inside its function,
so ``ampkit --help`` and ``ampkit lint`` start fast. Library errors (:class:`AmpkitError`)
are rendered here as one line on stderr with the error's exit code, never a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import sys
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NoReturn, TextIO

import click

from ampkit.errors import AmpkitError, PrecisionWarning, StorageError

__all__ = ["main"]


#: click >= 8.2 raises this usage error to show a group's help when no command is given.
_NO_ARGS_IS_HELP: tuple[type[click.UsageError], ...] = tuple(
    getattr(click.exceptions, name)
    for name in ("NoArgsIsHelpError",)
    if hasattr(click.exceptions, name)
)

#: ``errno`` values of a write that failed for lack of room or rights on the disk.
_STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}


class _AmpkitGroup(click.Group):
    """A click group that renders :class:`AmpkitError` as one line and exits non-zero.

    Also one line: click's own usage errors (a value of the wrong type, an unknown option or
    command; exit 2, with the ``--help`` to read), a full or read-only disk met by a writer
    that did not say so itself (exit 1), and Ctrl-C (exit 130). Under ``ampkit train
    --nproc``, only rank 0 prints an error: the other ranks meet the same one (settings,
    checkpoints and the loss are shared).
    """

    def main(  # type: ignore[override]  # click's signature, narrowed to what ampkit passes
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except _NO_ARGS_IS_HELP as exc:  # bare ``ampkit``: the help page, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            _fail(_usage_line(exc), exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except click.Abort:
            _fail("interrupted (Ctrl-C).", 130)
        # Without standalone mode click returns the code of an explicit exit (``--help``,
        # ``--version``: 0) or the command's return value (ampkit's commands return None).
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with warnings.catch_warnings(), _signals_said():  # both restored after
                warnings.showwarning = functools.partial(_show_warning, warnings.showwarning)
                return super().invoke(ctx)
        except AmpkitError as exc:
            _fail(_spoken_as_flag(exc), exc.exit_code)
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                raise
            from ampkit._torch import torch_missing_message

            _fail(torch_missing_message(f"ampkit {ctx.invoked_subcommand}"), 2)
        except OSError as exc:
            if exc.errno not in _STORAGE_ERRNOS:
                raise
            _fail(str(StorageError.from_os_error(exc, exc.filename or "a file")), 1)
        except KeyboardInterrupt:
            _fail("interrupted (Ctrl-C).", 130)


#: Signals that end a process silently by default; outside training (where the Trainer's own
#: handlers stop at a step boundary) the command says so in one line before it ends.
_SAID_SIGNALS = ("SIGTERM", "SIGHUP", "SIGUSR1")


@contextlib.contextmanager
def _signals_said() -> Iterator[None]:
    """While a command runs (in the process the user started, on the main thread): a
    :data:`_SAID_SIGNALS` signal prints one ``ampkit: error:`` line, then ends the process by
    that signal as it would have without a handler (the same exit status). ``Trainer.fit``
    replaces these handlers with its own while it trains and puts them back after."""
    import os
    import signal
    import threading

    from ampkit._process import launched_by_ampkit

    if (
        launched_by_ampkit() is not None
        or threading.current_thread() is not threading.main_thread()
    ):
        yield  # workers of an --nproc job: the launcher speaks for them
        return

    def said(signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        click.echo(
            f"ampkit: error: stopped by {name} outside a training step (before training "
            "started or after it ended), so the command did not finish and nothing after the "
            "last checkpoint was saved. Run it again (ampkit train: with --resume auto).",
            err=True,
        )
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    numbers = [getattr(signal, name) for name in _SAID_SIGNALS if hasattr(signal, name)]
    previous = {sig: signal.signal(sig, said) for sig in numbers}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _show_warning(
    fallback: Callable[..., None],
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """ampkit's own warnings as one ``ampkit: warning:`` line (rank 0 only under ``--nproc``);
    the file and line of a command-line run say nothing to its user. Other libraries'
    warnings keep Python's format (``fallback``, the ``showwarning`` in place before)."""
    if not issubclass(category, PrecisionWarning):
        fallback(message, category, filename, lineno, file, line)
        return
    if _is_reporting_rank():
        click.echo(f"ampkit: warning: {message}", err=True)


def _spoken_as_flag(exc: AmpkitError) -> str:
    """The error's message with the argument it starts with spoken as its flag: a library
    error ``model: ...`` raised with ``argument="model"`` reads ``--model: ...`` here."""
    message = str(exc)
    argument = exc.argument
    if argument and message.startswith(f"{argument}: "):
        flag = "--" + argument.replace("_", "-")
        return flag + message[len(argument) :]
    return message


def _usage_line(exc: click.UsageError) -> str:
    """Click's usage error as one line: its message, then the help that lists what is
    allowed (``ampkit train --help``)."""
    message = exc.format_message().strip()
    end = "" if message.endswith((".", "?", "!")) else "."
    where = exc.ctx.command_path if exc.ctx is not None else "ampkit"
    return f"{message}{end} See '{where} --help'."


def _is_reporting_rank() -> bool:
    """Rank 0 of an ``--nproc`` job, or a process ampkit did not launch."""
    import os

    from ampkit._process import launched_by_ampkit

    return launched_by_ampkit() is None or os.environ.get("RANK", "0") == "0"


def _fail(message: str, code: int) -> NoReturn:
    if _is_reporting_rank():
        click.echo(f"ampkit: error: {message}", err=True)
    sys.exit(code)


@click.group(cls=_AmpkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ampkit")
def main() -> None:
    """Mixed-precision training for PyTorch that is correct, fast and easy to debug.

    \b
    Examples:
      ampkit train                      # train the built-in GPT, precision chosen from the hardware
      ampkit train --precision bf16 --steps 100 --out runs/bf16
      ampkit formats                    # fp32/fp16/bf16/fp8 ranges, computed from torch
      ampkit lint train.py              # find AMP bugs (unscaled clipping, ...) statically
      ampkit doctor                     # which layers break fp16, and what to train in
      ampkit bench                      # is mixed precision faster for this model here? measured
      ampkit export --checkpoint runs/a --out gpt.onnx   # fp16 ONNX, checked against fp32
      ampkit checkpoint export runs/a --out model.safetensors   # checkpoint -> one fp32 file
      ampkit report runs/fp32 runs/bf16 --out report.html   # plots, and is bf16 within noise?
      ampkit compare --a fp32 --b bf16+compile   # the first module where two settings part
    """


def _register() -> None:
    from ampkit.cli.bench_cmd import bench
    from ampkit.cli.checkpoint_cmd import checkpoint
    from ampkit.cli.compare_cmd import compare
    from ampkit.cli.doctor_cmd import doctor
    from ampkit.cli.export_cmd import export
    from ampkit.cli.formats_cmd import formats
    from ampkit.cli.lint_cmd import lint
    from ampkit.cli.report_cmd import report
    from ampkit.cli.train_cmd import train

    main.add_command(train)
    main.add_command(formats)
    main.add_command(lint)
    main.add_command(doctor)
    main.add_command(bench)
    main.add_command(export)
    main.add_command(checkpoint)
    main.add_command(report)
    main.add_command(compare)


_register()
