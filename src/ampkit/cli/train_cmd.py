"""``ampkit train``: train the built-in GPT (or one on your text) in the best precision."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from ampkit.job.config import Setting, TrainConfig, settings, value_problem

__all__ = ["train"]


def _positive_or_none(value: float) -> float | None:
    return None if value == 0 else value


def _settings_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """One click option per row of the settings table (:func:`ampkit.job.config.settings`):
    the flag, type, default, choices and help of each come from its ``TrainConfig`` field."""
    for row in reversed(settings()):
        if row.option is None:
            continue  # a key of the --config file only
        decls = [row.flag or row.option, row.name]
        kwargs: dict[str, Any] = {"help": row.help, "default": row.default}
        if row.type is bool and "/" not in decls[0]:
            kwargs["is_flag"] = True
        elif row.type is not bool:
            kwargs["type"] = _click_type(row)
            kwargs["show_default"] = row.show_default
        if row.many:
            kwargs["multiple"] = True
        if row.metavar:
            kwargs["metavar"] = row.metavar
        function = click.option(*decls, **kwargs)(function)
    return function


def _click_type(row: Setting) -> Any:
    if row.choices:
        return click.Choice(list(row.choices))
    if row.path:
        return click.Path(dir_okay=row.path != "file", file_okay=row.path != "dir")
    return {int: click.INT, float: click.FLOAT}.get(row.type, click.STRING)


@click.command()
@_settings_options
@click.option(
    "--nproc",
    type=int,
    default=1,
    show_default=True,
    help="Launch N processes (per node) with torchrun (DDP); --batch-size is per process.",
)
@click.option(
    "--nnodes",
    type=int,
    default=1,
    show_default=True,
    help="Nodes in the job (torchrun's --nnodes): run this command on each node with its "
    "--node-rank and the same --master-addr/--master-port (or --rdzv-endpoint). Under SLURM "
    "(one task per node) all of it is read from the environment. --out must be shared storage.",
)
@click.option(
    "--node-rank", type=int, default=0, show_default=True, help="This node's rank (0 to M-1)."
)
@click.option("--master-addr", default=None, help="Host of the node with --node-rank 0.")
@click.option(
    "--master-port", type=int, default=None, help="A free port on that host. [default: 29500]"
)
@click.option(
    "--rdzv-endpoint",
    default=None,
    metavar="HOST:PORT",
    help="torchrun's c10d rendezvous instead of --master-addr/--node-rank (ranks are assigned "
    "as nodes join).",
)
@click.option("--rdzv-id", default=None, help="The job's id for --rdzv-endpoint.")
@click.option(
    "--progress/--no-progress", default=True, show_default=True, help="Show a progress bar."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, path_type=str),
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _param, value: _read_config_file(ctx, value),
    help="Read the settings from this TOML file: every option as a key (steps = 300, "
    'keep-fp32 = ["head"]), plus '
    + ", ".join(row.name for row in settings() if row.option is None)
    + ". Options on the command line override the file.",
)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print the effective settings as TOML (what --config reads) and exit without training.",
)
def train(**options: Any) -> None:
    """Train a model with mixed precision: the built-in byte-level GPT, or your --model.

    Without --out the run is kept in a fresh folder, runs/<UTC time>-<model>. With no arguments
    it trains on the Python standard library's sources in the precision the
    hardware supports best, and finishes in about a minute on a 2-core CPU. SIGTERM, SIGUSR1,
    SIGINT and SIGHUP finish the current step, write a checkpoint (with --checkpoint-every)
    and exit 128 + signal; continue with --resume auto.

    \b
    Examples:
      ampkit train
      ampkit train --precision bf16 --steps 100 --out runs/bf16
      ampkit train --data notes.txt --grad-accum 4 --max-grad-norm 0.5
      ampkit train --model hf:gpt2:tiny --data notes.txt --out runs/gpt2 --steps 200
      ampkit train --model hf:vit:tiny --steps 50   # its own synthetic batches
      ampkit train --model mypkg.models:build --data mypkg.data:train_set
      ampkit train --out runs/a --checkpoint-every 50 --keep-last 2
      ampkit train --out runs/a --resume auto   # after a crash: same steps, checkpoints
      ampkit train --out runs/a --resume auto --precision bf16 --allow-precision-change
      ampkit train --nproc 2 --batch-size 8    # = torchrun --nproc_per_node=2 -m ampkit train
      ampkit train --nproc 8 --nnodes 2 --node-rank 0 --master-addr node01 --out /shared/a
      ampkit train --print-config > run.toml   # then: ampkit train --config run.toml
      ampkit train --precision bf16-true --state-precision bf16-stochastic
    """
    import os

    nproc = options.pop("nproc")
    launch_options = {name: options.pop(name) for name in _LAUNCH_OPTIONS}
    print_config = options.pop("print_config")
    options.update(click.get_current_context().meta.get(_FILE_ONLY, {}))
    if nproc < 1:
        raise click.BadParameter(f"{nproc} is invalid; use 1 or more.", param_hint="--nproc")
    show_progress = options.pop("progress") and os.environ.get("RANK", "0") == "0"
    if options["compile_mode"] is not None:
        options["compile"] = True
    options["max_grad_norm"] = _positive_or_none(options["max_grad_norm"])
    options = {name: tuple(v) if isinstance(v, list) else v for name, v in options.items()}
    config = TrainConfig.from_settings(options)
    if print_config:
        config.validate()  # it writes only what --config accepts
        click.echo(config_as_toml(config, nproc), nl=False)
        return
    if config.out is None and not config.resume and "LOCAL_RANK" not in os.environ:
        # a run is kept, in a fresh folder (workers get the launcher's from their command line)
        config = dataclasses.replace(config, out=fresh_run_folder(config.model))
    config.validate()
    given = _given_on_command_line()
    if "LOCAL_RANK" not in os.environ:
        spec = _launch_spec(nproc, config, launch_options, slurm="nnodes" not in given)
        if spec is not None:
            sys.exit(_launch_torchrun(config, spec, given))
    _tie_worker_to_agent()
    from ampkit.job.job import train as run_training
    from ampkit.trainer.callbacks import ProgressBar

    with _worker_errors():
        summary = run_training(
            config, callbacks=[ProgressBar()] if show_progress else [], given=given
        )
    if os.environ.get("RANK", "0") == "0":
        click.echo(summary.nothing_to_do or _render_summary(summary))


#: The options of the launch (torchrun's), not settings of the run.
_LAUNCH_OPTIONS = ("nnodes", "node_rank", "master_addr", "master_port", "rdzv_endpoint", "rdzv_id")


def _launch_spec(
    nproc: int, config: TrainConfig, options: dict[str, Any], *, slurm: bool = True
) -> Any:
    """The torchrun launch the options ask for (None: train in this process). Under SLURM
    with several nodes (``slurm``: no --nnodes given), the launch comes from the environment.

    Raises:
        click.BadParameter: a launch option out of range or missing its partner.
    """
    import os

    from ampkit.cli.torchrun import LaunchSpec, slurm_launch

    nnodes, node_rank = options["nnodes"], options["node_rank"]
    endpoint, port = options["rdzv_endpoint"], options["master_port"]
    timeout = max(1, math.ceil(config.dist_timeout))
    if nnodes < 1:
        raise click.BadParameter(f"{nnodes} is invalid; use 1 or more.", param_hint="--nnodes")
    if not 0 <= node_rank < nnodes:
        raise click.BadParameter(
            f"{node_rank} is invalid with --nnodes {nnodes}; use 0 to {nnodes - 1}.",
            param_hint="--node-rank",
        )
    if port is not None and not 0 < port < 65536:
        raise click.BadParameter(
            f"{port} is not a port; use 1 to 65535.", param_hint="--master-port"
        )
    if endpoint is not None and (":" not in endpoint or not endpoint.rsplit(":", 1)[1].isdigit()):
        raise click.BadParameter(
            f"{endpoint!r} is not HOST:PORT (e.g. node01:29400).", param_hint="--rdzv-endpoint"
        )
    if nnodes == 1 and endpoint is None:
        try:
            from_slurm = slurm_launch(os.environ, nproc) if slurm else None
        except ValueError as exc:
            raise click.BadParameter(f"{exc}.", param_hint="--nnodes") from None
        if from_slurm is not None:
            return dataclasses.replace(from_slurm, shutdown_timeout=timeout)
        if nproc == 1:
            return None
    if nnodes > 1 and endpoint is None and options["master_addr"] is None:
        raise click.BadParameter(
            f"--nnodes {nnodes} needs --master-addr HOST (the node with --node-rank 0) and "
            "--master-port, or --rdzv-endpoint HOST:PORT.",
            param_hint="--master-addr",
        )
    return LaunchSpec(
        nproc=nproc,
        nnodes=nnodes,
        node_rank=node_rank,
        master_addr=options["master_addr"],
        master_port=port,
        rdzv_endpoint=endpoint,
        rdzv_id=options["rdzv_id"],
        shutdown_timeout=timeout,
    )


@contextlib.contextmanager
def _worker_errors() -> Iterator[None]:
    """How a training process ends on what is not a plain error line: a stop on a signal (one
    line, exit ``128 + signal``), a worker of ``--nproc`` that lost its peers (no traceback:
    the launcher names the rank that failed first), and a worker's own error (recorded for
    the launcher, which names it when that rank failed first)."""
    import os

    from ampkit._process import launched_by_ampkit
    from ampkit.cli.torchrun import PEER_LOST, report_to_launcher, write_error_file
    from ampkit.errors import AmpkitError, TrainingInterrupted

    worker = launched_by_ampkit() is not None
    rank = os.environ.get("RANK", "0")
    try:
        yield
    except TrainingInterrupted as exc:
        line = f"ampkit: error: {_stopped_line(exc)}"
        if rank == "0" and not (worker and report_to_launcher(line)):
            click.echo(line, err=True)
        sys.exit(exc.exit_code)
    except AmpkitError as exc:
        if worker:
            write_error_file(str(exc))
        raise
    except Exception as exc:
        if not _lost_peer(exc):
            raise
        if worker:
            sys.exit(PEER_LOST)
        click.echo(
            f"ampkit: error: rank {rank} lost its connection to the other processes of the job "
            f"({_first_line(exc)}); one of them probably failed: see its output.",
            err=True,
        )
        sys.exit(1)


def _stopped_line(exc: Any) -> str:
    """The one line of a stop on a signal, in the command line's words."""
    where = f"stopped by {exc.signal_name} at step {exc.step}"
    if exc.checkpoint is not None:
        return f"{where}; checkpoint written to {exc.checkpoint}; continue with --resume auto."
    return (
        f"{where}; no checkpoint was written (the run has no --checkpoint-every), so its "
        f"{exc.step} steps are lost. Add --out DIR --checkpoint-every N to keep them."
    )


def _lost_peer(exc: BaseException) -> bool:
    """Whether ``exc`` is a collective failing because another process went away."""
    import torch.distributed as dist

    kinds = tuple(getattr(dist, name) for name in ("DistError",) if hasattr(dist, name))
    if kinds and isinstance(exc, kinds):
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        marker in text
        for marker in (
            "Connection closed by peer",
            "Connection reset by peer",
            "Broken pipe",
            "NCCL communicator was aborted",
        )
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _given_on_command_line() -> frozenset[str]:
    """The options given on the command line (or by environment), not left at the default:
    on resume the others of the carried settings come from the checkpoint."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP)
    return frozenset(
        name for name in ctx.params if ctx.get_parameter_source(name) in given
    ) | frozenset(ctx.meta.get(_FILE_ONLY, {}))


#: The largest --config file read (a TOML of every setting is about 2 KB).
CONFIG_LIMIT = 1 << 20
#: Where --config leaves the settings that have no option of their own (ctx.meta key).
_FILE_ONLY = "ampkit.train.file_only"


def _read_config_file(ctx: click.Context, path: str | None) -> None:
    """``--config FILE``: the file's settings become the options' defaults (so the command
    line overrides them); settings without an option are kept for TrainConfig.

    Raises:
        click.BadParameter: the file cannot be read, is not TOML, or has an unknown key or a
            value of the wrong kind (exit 2, before any work).
    """
    if path is None:
        return
    from pathlib import Path

    from ampkit._files import read_regular

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ModuleNotFoundError:
            raise click.BadParameter(
                "reading TOML needs Python 3.11+ or the tomli package (pip install tomli).",
                param_hint="--config",
            ) from None
    try:
        data = tomllib.loads(read_regular(Path(path), CONFIG_LIMIT).decode("utf-8"))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path} ({exc.strerror or exc}).", param_hint="--config"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"{path} is not valid TOML: {exc}.", param_hint="--config"
        ) from None
    except ValueError as exc:  # a FIFO or device (--config /dev/zero), or too large
        raise click.BadParameter(
            f"cannot read {path} ({exc}). Pass a TOML file of at most {CONFIG_LIMIT} bytes.",
            param_hint="--config",
        ) from None
    params = {
        p.name: p for p in ctx.command.params if p.name not in (None, "print_config", "config_file")
    }
    rows = {row.name: row for row in settings()}
    defaults: dict[str, Any] = {}
    file_only: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in spelled:
            raise click.BadParameter(
                f"{path}: {spelled[name]!r} and {key!r} are the same setting. Keep one of them.",
                param_hint="--config",
            )
        spelled[name] = str(key)
        if isinstance(value, dict):
            raise click.BadParameter(
                f"{path}: [{key}] is a table; write the settings as top-level keys (steps = 300).",
                param_hint="--config",
            )
        row = rows.get(name)
        if row is None and name not in params:
            allowed = sorted(n.replace("_", "-") for n in {*params, *rows})
            raise click.BadParameter(
                f"{path}: unknown setting {key!r}. Known: {', '.join(allowed)}.",
                param_hint="--config",
            )
        problem = row.file_problem(value) if row else _param_problem(params[name], value)
        if problem:
            raise click.BadParameter(f"{path}: {key}: {problem}.", param_hint="--config")
        if row is not None and row.option is None:
            file_only[name] = value
        else:
            defaults[name] = value
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[_FILE_ONLY] = file_only


def _param_problem(param: click.Parameter, value: Any) -> str | None:
    """What is wrong with a ``--config`` value for an option outside the settings table
    (``nproc``, the launch options, ``progress``), by the option's click type."""
    kinds = {click.types.IntParamType: int, click.types.FloatParamType: float}
    kind = next((k for t, k in kinds.items() if isinstance(param.type, t)), str)
    if isinstance(param, click.Option) and param.is_flag:
        kind = bool
    return value_problem(kind, value)


def config_as_toml(config: TrainConfig, nproc: int = 1) -> str:
    """The settings as a TOML document ``--config`` reads back (None values are left out:
    TOML has no null, and a left-out key keeps its default)."""
    import json

    lines = [f"nproc = {nproc}"]
    for key, value in config.to_dict().items():
        if value is None and key == "max_grad_norm":
            value = 0  # the command line's "no clipping" (its default is 1.0)
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)
        elif isinstance(value, (list, tuple)):
            text = "[" + ", ".join(json.dumps(item) for item in value) + "]"
        else:
            text = json.dumps(str(value))
        lines.append(f"{key} = {text}")
    return "\n".join(lines) + "\n"


def _tie_worker_to_agent() -> None:
    """A worker of ``--nproc``: die (SIGKILL) with the torchrun agent that started it."""
    import os
    import signal

    from ampkit._process import AGENT_PID, die_with_parent, launched_by_ampkit

    agent = os.environ.get(AGENT_PID, "")
    if launched_by_ampkit() is not None and agent.isdigit():
        die_with_parent(int(agent), signal.SIGKILL)


def _launch_torchrun(config: TrainConfig, spec: Any, given: frozenset[str]) -> int:
    """Check the run, hold ``--out``'s lock (the first node's launcher), and re-run this
    command under torchrun as ``spec`` says (:mod:`ampkit.cli.torchrun`); return its exit
    status."""
    import signal

    from ampkit.cli.torchrun import launch
    from ampkit.job.job import prepare_run

    first_node = spec.node_rank == 0 and spec.rdzv_endpoint is None
    with prepare_run(
        config, world_size=spec.world_size, given=given, is_main=first_node or spec.nnodes == 1
    ) as plan:
        if plan.finished is not None:
            click.echo(plan.finished)
            return 0
        config = plan.config or config
        named = [] if "out" in given else ["--out", str(config.out)]  # the launcher's fresh one
        result = launch(spec, [*_without_nproc(sys.argv[1:]), *named])
    if result.report:  # rank 0's own line: stopped by a signal at step N, checkpoint at ...
        click.echo(result.report, err=True)
        return result.status
    more = (
        " Continue from the last checkpoint with --resume auto."
        if config.checkpoint_every or config.resume
        else ""
    )
    workers = f"all {spec.nproc} workers" if spec.nproc > 1 else "its worker"
    if result.forwarded is not None:
        name = signal.Signals(result.forwarded).name
        click.echo(
            f"ampkit: error: stopped by {name}; the torchrun agent and {workers} were "
            f"stopped.{more}",
            err=True,
        )
    elif result.agent_signal is not None:
        name = signal.Signals(result.agent_signal).name
        click.echo(
            f"ampkit: error: the torchrun agent was killed by {name}; {workers} die with it.{more}",
            err=True,
        )
    return result.status


def fresh_run_folder(model: str, root: str = "runs") -> str:
    """``runs/<UTC time>-<model>``, the folder a run without ``--out`` writes to: a name no
    folder has yet (``-2``, ``-3``, ... appended when one does)."""
    import re
    import time
    from pathlib import Path

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = Path(root) / f"{stamp}-{re.sub(r'[^A-Za-z0-9_.]+', '-', model).strip('-')}"
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return str(candidate)


def _without_nproc(args: list[str]) -> list[str]:
    """The command line without ``--nproc N``, for the workers."""
    cleaned, skip = [], False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        if arg.startswith("--nproc="):
            continue
        cleaned.append(arg)
    return cleaned


def _rate(summary: Any) -> str:
    if summary.tokens_per_s is None:  # a run that does not know its tokens per sample
        return f"{summary.samples_per_s:,.0f} samples/s"
    return f"{summary.tokens_per_s:,.0f} tokens/s"


def _render_summary(summary: Any) -> str:
    rows = [
        ("precision", f"{summary.precision} on {summary.device}"),
        ("why", summary.reason),
        ("data", summary.data),
        ("parameters", f"{summary.parameters:,}"),
        ("steps", f"{summary.steps} ({summary.skipped_steps} skipped)"),
        ("final loss", f"{summary.final_loss:.4f}"),
        ("throughput", f"{_rate(summary)} over {summary.wall_s:.1f} s"),
        (
            "peak memory",
            f"{summary.peak_memory_bytes / 2**20:,.0f} MiB ({summary.peak_memory_kind})",
        ),
    ]
    from ampkit.precision.spelling import precision_facts, registered_precisions

    # the run's canonical precision: its facts are looked up, the name is not parsed again
    if (
        summary.precision in registered_precisions()
        and precision_facts(summary.precision).uses_scaler
    ):
        rows.insert(5, ("loss scale", f"{summary.final_scale:g}"))
    rows[5:5] = summary.mode_rows
    if summary.world_size > 1:
        rows.insert(1, ("processes", f"{summary.world_size} (batch per process)"))
    rows.extend(("note", note) for note in summary.notes)
    if summary.out:
        rows.append(("outputs", f"{summary.out}/metrics.jsonl, model.safetensors, summary.json"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.rjust(width)}  {v}" for k, v in rows)
