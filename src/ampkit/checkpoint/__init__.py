"""The on-disk checkpoint format every ampkit tool reads and writes.

* :mod:`~ampkit.checkpoint.folder`: a ``step-NNNNNNNN`` folder written atomically (temporary
  folder, fsync, ``os.replace``), its manifest with a BLAKE3 digest per file, verification, lookup
  and pruning;
* :mod:`~ampkit.checkpoint.weights`: fp32 safetensors weights (ties kept, non-finite refused);
* :mod:`~ampkit.checkpoint.sharded`: sharded (``torch.distributed.checkpoint``) contents.

One save path and one reader: every weights file is written by
:func:`~ampkit.checkpoint.weights.write_weights` (a full checkpoint's, final weights, an
export), every checkpoint folder is sealed by :func:`~ampkit.checkpoint.folder.commit_checkpoint`,
and weights are read by :func:`~ampkit.checkpoint.folder.read_weights` (a ``.safetensors``
file, a checkpoint folder of either layout, or a run folder).

What a Trainer checkpoint holds (the random-number generators of a run included), and how it
is taken from and put back into a run, is the Trainer's business
(:mod:`ampkit.trainer.checkpointing`); the format here knows no Trainer.
"""
