"""``ampkit checkpoint``: work with the Trainer's checkpoints offline (no process group)."""

from __future__ import annotations

import click

__all__ = ["checkpoint"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def checkpoint() -> None:
    """Work with Trainer checkpoints (full or sharded) without training.

    \b
    Examples:
      ampkit checkpoint verify runs/a
      ampkit checkpoint export runs/a --out model.safetensors
      ampkit checkpoint export runs/a/checkpoints/step-00000500 --out model.safetensors
      ampkit checkpoint export torchtitan/checkpoint/step-1000 --out model.safetensors
    """


@checkpoint.command()
@click.argument("run", type=click.Path(file_okay=True, dir_okay=True))
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="The safetensors file to write (fp32, written atomically).",
)
def export(run: str, out: str) -> None:
    """Write the model weights of a checkpoint into one fp32 safetensors file.

    RUN is a run folder (the newest valid checkpoint in RUN/checkpoints), a checkpoints folder
    (its newest valid checkpoint) or one step-NNNNNNNN folder. Sharded checkpoints
    (torch.distributed.checkpoint, any number of writers) are consolidated in this one
    process. Every file is verified against the manifest first; a damaged checkpoint is
    refused by name. Tied weights are stored once (safetensors.torch.load_model ties them).
    RUN may also be a torch.distributed.checkpoint folder that ampkit did not write (dcp.save
    of {"model": ..., ...}, or torchtitan's): its model weights are exported, with a note.
    """
    from ampkit.checkpoint.folder import is_plain_dcp, read_weights, resolve_checkpoint
    from ampkit.checkpoint.weights import write_weights

    path, skipped = resolve_checkpoint(run)
    for problem in skipped:
        click.echo(f"ampkit: skipped a damaged checkpoint: {problem}", err=True)
    weights = read_weights(path)
    if is_plain_dcp(path):
        click.echo(
            f"ampkit: note: {path} is a torch.distributed.checkpoint folder that ampkit did not "
            "write: exported its model weights; it has no manifest, so its files were not "
            "checked against a manifest's hashes, and nothing else in it was read.",
            err=True,
        )
    aliases = write_weights(out, weights.tensors, aliases=weights.aliases)
    stored = {k: v for k, v in weights.tensors.items() if k not in aliases}
    mib = sum(v.numel() * 4 for v in stored.values()) / 2**20
    tied = f", {len(aliases)} tied" if aliases else ""
    click.echo(f"exported {path} -> {out} ({len(stored)} tensors{tied}, {mib:.1f} MiB fp32)")


@checkpoint.command()
@click.argument("run", type=click.Path(file_okay=True, dir_okay=True))
def verify(run: str) -> None:
    """Verify every checkpoint of a run against its manifest, without loading it.

    RUN is a run folder (every checkpoint in RUN/checkpoints), a checkpoints folder or one
    step-NNNNNNNN folder. Each file's size and hash are checked (the check every load and
    --resume auto make) and a sharded checkpoint's index is read safely. Prints one line per
    checkpoint and the one --resume auto would take; exits 1 when any checkpoint is damaged,
    naming the file. RUN may also be a torch.distributed.checkpoint folder that ampkit did not
    write (torchtitan's): it has no hashes, so its index is read safely and every shard file is
    checked to be there and as long as the index says.
    """
    from ampkit.checkpoint.survey import survey_checkpoints
    from ampkit.errors import CheckpointError

    survey = survey_checkpoints(run)
    for check in survey.checks:
        if check.ok and check.plain_files is not None:
            click.echo(
                f"ok       {check.path.name}  a torch.distributed.checkpoint folder ampkit did "
                f"not write: its index reads safely and its {check.plain_files} shard files "
                "are complete by the index's sizes (no manifest, so no hashes to check)"
            )
        elif check.ok:
            click.echo(
                f"ok       {check.path.name}  {check.layout}, {check.files} files, "
                f"{check.bytes / 1e6:.1f} MB, {check.digest} verified in {check.seconds:.2f} s"
            )
        else:
            click.echo(f"DAMAGED  {check.path.name}  {check.problem}")
    for tmp in survey.incomplete:
        click.echo(f"ignored  {tmp.name}  an incomplete write (never loaded)")
    newest = survey.newest_valid
    if len(survey.checks) > 1 or survey.incomplete:
        taken = newest.path.name if newest else "none (it would start fresh or stop)"
        click.echo(f"--resume auto takes: {taken}")
    damaged = survey.damaged
    if damaged:
        names = ", ".join(check.path.name for check in damaged)
        raise CheckpointError(
            f"checkpoint: {len(damaged)} of {len(survey.checks)} checkpoints in {survey.root} "
            f"failed verification ({names}); see the lines above."
        )
