"""``ampkit train``: train the built-in GPT (or one on your text) in the best precision."""

from __future__ import annotations

import sys
from typing import Any

import click

from ampkit.gpt.config import TrainConfig

__all__ = ["train"]

_DEFAULT = TrainConfig.defaults()


def _positive_or_none(value: float) -> float | None:
    return None if value == 0 else value


@click.command()
@click.option(
    "--precision",
    default=_DEFAULT["precision"],
    show_default=True,
    help="auto, fp32, fp16, bf16, fp16-mixed, bf16-mixed, bf16-true (bf16 weights and "
    "optimizer state) or fp8 (fp8-tensorwise, fp8-rowwise, fp8-rowwise-gw-hp; CUDA 8.9+). "
    "auto picks from the hardware (never bf16-true or fp8).",
)
@click.option(
    "--device",
    default=None,
    help="cpu, cuda or cuda:N (NVIDIA, or AMD under ROCm), mps, xpu or xpu:N. "
    "[default: the first of cuda, xpu, mps available, else cpu]",
)
@click.option(
    "--steps", type=int, default=_DEFAULT["steps"], show_default=True, help="Optimizer steps."
)
@click.option(
    "--batch-size",
    type=int,
    default=_DEFAULT["batch_size"],
    show_default=True,
    help="Sequences per micro-batch.",
)
@click.option(
    "--seq-len",
    type=int,
    default=_DEFAULT["seq_len"],
    show_default=True,
    help="Tokens (bytes) per sequence.",
)
@click.option(
    "--grad-accum",
    type=int,
    default=_DEFAULT["grad_accum"],
    show_default=True,
    help="Micro-batches per optimizer step.",
)
@click.option(
    "--max-grad-norm",
    type=float,
    default=_DEFAULT["max_grad_norm"],
    show_default=True,
    help="Clip the unscaled gradient norm to this; 0 disables clipping.",
)
@click.option(
    "--lr", type=float, default=_DEFAULT["lr"], show_default=True, help="Peak AdamW learning rate."
)
@click.option(
    "--seed",
    type=int,
    default=_DEFAULT["seed"],
    show_default=True,
    help="Seed for weights and batches.",
)
@click.option(
    "--data",
    type=click.Path(dir_okay=False),
    default=None,
    help="A UTF-8 text file to train on. [default: Python's standard-library sources]",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default=None,
    help="Folder for metrics.jsonl, summary.json, model.safetensors and checkpoints/.",
)
@click.option(
    "--log-every",
    type=int,
    default=_DEFAULT["log_every"],
    show_default=True,
    help="Steps between metric rows.",
)
@click.option(
    "--checkpoint-every",
    type=int,
    default=None,
    help="Write OUT/checkpoints/step-N every N steps (atomic, verified).",
)
@click.option("--keep-last", type=int, default=None, help="Keep only the newest N checkpoints.")
@click.option(
    "--resume",
    default=None,
    help="auto: continue from the newest valid checkpoint in OUT/checkpoints (or start fresh "
    "in an empty OUT); or a checkpoint folder. Settings must match the checkpoint's, except "
    "--steps, --lr (applied to the schedule) and the logging/checkpoint flags. Carried over "
    "from the checkpoint unless given again: --steps, --log-every, --checkpoint-every, "
    "--keep-last. A run that has done its steps is left as it is (nothing to do).",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace an earlier run in OUT (deletes its metrics.jsonl, summary.json, "
    "model.safetensors, checkpoints/ and tensorboard/). Without it a fresh run refuses such "
    "a folder.",
)
@click.option(
    "--n-layer",
    type=int,
    default=_DEFAULT["n_layer"],
    show_default=True,
    help="Transformer blocks of the GPT.",
)
@click.option(
    "--n-head", type=int, default=_DEFAULT["n_head"], show_default=True, help="Attention heads."
)
@click.option(
    "--n-embd",
    type=int,
    default=_DEFAULT["n_embd"],
    show_default=True,
    help="Width of the GPT (a multiple of --n-head).",
)
@click.option(
    "--allow-precision-change",
    is_flag=True,
    help="With --resume: accept a checkpoint saved under another precision (e.g. fp16 -> bf16 "
    "after a divergence); weights and optimizer carry over, the loss-scaler state is dropped "
    "and the change is recorded in metrics.jsonl.",
)
@click.option(
    "--compile/--no-compile",
    "compile_",
    default=None,
    help="torch.compile the model. [default: on for fp8 on CUDA, else off]",
)
@click.option(
    "--compile-mode",
    type=click.Choice(["default", "reduce-overhead", "max-autotune"]),
    default=None,
    help="torch.compile mode (implies --compile); reduce-overhead uses CUDA graphs.",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "ddp", "fsdp", "none"]),
    default=_DEFAULT["strategy"],
    show_default=True,
    help="Data parallelism under torchrun: DDP, FSDP2 (fully_shard) or none.",
)
@click.option(
    "--nproc",
    type=int,
    default=1,
    show_default=True,
    help="Launch N processes with torchrun (DDP); --batch-size is per process.",
)
@click.option(
    "--keep-fp32",
    multiple=True,
    metavar="MODULE",
    help="Run this module of the GPT in fp32 under autocast (repeatable), e.g. head.",
)
@click.option(
    "--detect-nonfinite",
    is_flag=True,
    help="Stop at the first inf/NaN and name the module that produced it.",
)
@click.option(
    "--update-compensation",
    type=click.Choice(["kahan", "stochastic", "none"]),
    default=None,
    help="bf16-true only: Kahan-compensated or stochastically rounded weight updates, or none "
    "(warns: small updates are lost). [default: kahan]",
)
@click.option(
    "--logger",
    "loggers",
    multiple=True,
    type=click.Choice(["tensorboard", "mlflow", "wandb"]),
    help="Also send the logged steps to this tracker (repeatable): tensorboard "
    "(OUT/tensorboard), mlflow (a file store in OUT/mlruns), wandb (offline, in OUT).",
)
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
    'keep-fp32 = ["head"]), plus init_scale, growth_interval, warmup_steps, weight_decay. '
    "Options on the command line override the file.",
)
@click.option(
    "--print-config",
    is_flag=True,
    help="Print the effective settings as TOML (what --config reads) and exit without training.",
)
def train(**options: Any) -> None:
    """Train a small GPT-style byte-level model with mixed precision.

    With no arguments it trains on the Python standard library's sources in the precision the
    hardware supports best, and finishes in about a minute on a 2-core CPU.

    \b
    Examples:
      ampkit train
      ampkit train --precision bf16 --steps 100 --out runs/bf16
      ampkit train --data notes.txt --grad-accum 4 --max-grad-norm 0.5
      ampkit train --out runs/a --checkpoint-every 50 --keep-last 2
      ampkit train --out runs/a --resume auto   # after a crash: same steps, checkpoints
      ampkit train --out runs/a --resume auto --precision bf16 --allow-precision-change
      ampkit train --nproc 2 --batch-size 8    # = torchrun --nproc_per_node=2 -m ampkit train
      ampkit train --print-config > run.toml   # then: ampkit train --config run.toml
    """
    import os

    nproc = options.pop("nproc")
    print_config = options.pop("print_config")
    options.update(click.get_current_context().meta.get(_FILE_ONLY, {}))
    if nproc < 1:
        raise click.BadParameter(f"{nproc} is invalid; use 1 or more.", param_hint="--nproc")
    show_progress = options.pop("progress") and os.environ.get("RANK", "0") == "0"
    compile_ = options.pop("compile_")
    options["compile"] = True if options["compile_mode"] is not None else compile_
    options["max_grad_norm"] = _positive_or_none(options["max_grad_norm"])
    config = TrainConfig(**options)
    if print_config:
        click.echo(config_as_toml(config, nproc), nl=False)
        return
    given = _given_on_command_line()
    if nproc > 1 and "LOCAL_RANK" not in os.environ:
        sys.exit(_launch_torchrun(config, nproc, given))
    _tie_worker_to_agent()
    from ampkit.gpt.job import train as run_training
    from ampkit.trainer.callbacks import ProgressBar

    summary = run_training(config, callbacks=[ProgressBar()] if show_progress else [], given=given)
    if os.environ.get("RANK", "0") == "0":
        click.echo(summary.nothing_to_do or _render_summary(summary))


def _given_on_command_line() -> frozenset[str]:
    """The options given on the command line (or by environment), not left at the default:
    on resume the others of the carried settings come from the checkpoint."""
    from click.core import ParameterSource

    ctx = click.get_current_context()
    given = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT, ParameterSource.DEFAULT_MAP)
    return frozenset(
        name for name in ctx.params if ctx.get_parameter_source(name) in given
    ) | frozenset(ctx.meta.get(_FILE_ONLY, {}))


#: Where --config leaves the settings that have no option of their own (ctx.meta key).
_FILE_ONLY = "ampkit.train.file_only"
#: TrainConfig settings a --config file may set that have no command-line option.
_FILE_ONLY_KEYS = ("init_scale", "growth_interval", "warmup_steps", "weight_decay")
#: Keys whose option has another parameter name.
_PARAM_OF = {"compile": "compile_"}


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
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise click.BadParameter(
            f"cannot read {path} ({exc.strerror or exc}).", param_hint="--config"
        ) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise click.BadParameter(
            f"{path} is not valid TOML: {exc}.", param_hint="--config"
        ) from None
    params = {p.name for p in ctx.command.params if p.name} - {"print_config", "config_file"}
    defaults: dict[str, Any] = {}
    file_only: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        name = _PARAM_OF.get(name, name)
        if isinstance(value, dict):
            raise click.BadParameter(
                f"{path}: [{key}] is a table; write the settings as top-level keys (steps = 300).",
                param_hint="--config",
            )
        if name in _FILE_ONLY_KEYS:
            file_only[name] = value
        elif name in params:
            defaults[name] = value
        else:
            allowed = sorted(n.rstrip("_").replace("_", "-") for n in params | set(_FILE_ONLY_KEYS))
            raise click.BadParameter(
                f"{path}: unknown setting {key!r}. Known: {', '.join(allowed)}.",
                param_hint="--config",
            )
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    ctx.meta[_FILE_ONLY] = file_only


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


def _launch_torchrun(config: TrainConfig, nproc: int, given: frozenset[str]) -> int:
    """Check the run, hold ``--out``'s lock, and re-run this command under torchrun with
    ``nproc`` processes (:mod:`ampkit.cli.torchrun`); return its exit status."""
    import signal

    from ampkit.cli.torchrun import launch
    from ampkit.gpt.job import prepare_run

    with prepare_run(config, world_size=nproc, given=given) as plan:
        if plan.finished is not None:
            click.echo(plan.finished)
            return 0
        config = plan.config or config
        result = launch(nproc, _without_nproc(sys.argv[1:]))
    more = (
        " Continue from the last checkpoint with --resume auto."
        if config.checkpoint_every or config.resume
        else ""
    )
    if result.forwarded is not None:
        name = signal.Signals(result.forwarded).name
        click.echo(
            f"ampkit: error: stopped by {name}; the torchrun agent and all {nproc} workers were "
            f"stopped.{more}",
            err=True,
        )
    elif result.agent_signal is not None:
        name = signal.Signals(result.agent_signal).name
        click.echo(
            f"ampkit: error: the torchrun agent was killed by {name}; its {nproc} workers "
            f"die with it.{more}",
            err=True,
        )
    return result.status


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


#: How bf16-true keeps small weight updates, in the summary's words.
_COMPENSATION = {
    "kahan": "Kahan-compensated",
    "stochastic": "stochastic rounding",
    "none": "no compensation",
}


def _render_summary(summary: Any) -> str:
    rows = [
        ("precision", f"{summary.precision} on {summary.device}"),
        ("why", summary.reason),
        ("data", summary.data),
        ("parameters", f"{summary.parameters:,}"),
        ("steps", f"{summary.steps} ({summary.skipped_steps} skipped)"),
        ("final loss", f"{summary.final_loss:.4f}"),
        ("throughput", f"{summary.tokens_per_s:,.0f} tokens/s over {summary.wall_s:.1f} s"),
        (
            "peak memory",
            f"{summary.peak_memory_bytes / 2**20:,.0f} MiB ({summary.peak_memory_kind})",
        ),
    ]
    from ampkit.precision.policy import uses_loss_scaling

    if uses_loss_scaling(summary.precision):
        rows.insert(5, ("loss scale", f"{summary.final_scale:g}"))
    if summary.update_compensation is not None:
        how = _COMPENSATION.get(summary.update_compensation, summary.update_compensation)
        if summary.lost_updates is not None:
            how += f"; {summary.lost_updates:.2%} of the last logged step's updates rounded away"
        rows.insert(5, ("updates", f"bf16 weights, {how}"))
    if summary.world_size > 1:
        rows.insert(1, ("processes", f"{summary.world_size} (batch per process)"))
    rows.extend(("note", note) for note in summary.notes)
    if summary.out:
        rows.append(("outputs", f"{summary.out}/metrics.jsonl, model.safetensors, summary.json"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.rjust(width)}  {v}" for k, v in rows)
