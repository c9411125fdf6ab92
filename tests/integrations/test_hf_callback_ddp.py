"""AmpkitCallback in the Hugging Face Trainer under DDP: two CPU processes (gloo) started as
torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR/PORT). One rank's NaN weight: that rank
names the module at step 1, the other sees the NaN only after the all-reduce, and the replay
(collective-free) deadlocks neither."""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("transformers", reason="pip install 'ampkit[hf]'")

import torch.multiprocessing as mp  # noqa: E402

#: How long the worker releases the GIL after its last collective (see the end of _worker).
_GLOO_GRACE_S = 1.0

pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.timeout(240)]

WORLD = 2


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(WORLD),
        LOCAL_WORLD_SIZE=str(WORLD),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        HF_HUB_OFFLINE="1",
    )
    import warnings

    warnings.simplefilter("ignore")
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).parent))
    from test_hf_callback import dataset, gpt2

    from ampkit.integrations.transformers import AmpkitCallback

    class Poison(transformers.TrainerCallback):
        """NaN into one weight of rank 1 only, after DDP has broadcast rank 0's weights."""

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            if rank == 1:
                with torch.no_grad():
                    model.transformer.h[1].mlp.c_fc.weight[0, 0] = math.nan

    args = transformers.TrainingArguments(
        output_dir=str(Path(out) / "hf"),
        use_cpu=True,
        bf16=True,
        max_steps=3,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        per_device_train_batch_size=2,
        disable_tqdm=True,
        ddp_backend="gloo",
        seed=0,
    )
    trainer = transformers.Trainer(
        model=gpt2(), args=args, train_dataset=dataset(), callbacks=[Poison()]
    )
    cb = AmpkitCallback.attach(trainer)
    trainer.train()
    result = {
        "world": trainer.args.world_size,
        "step": cb.nonfinite_step,
        "module": None if cb.first is None else cb.first.module,
        "finding_step": None if cb.first is None else cb.first.step,
    }
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))
    # the HF Trainer leaves its group up: meet, then destroy it, so no rank exits while its
    # peer is still in a collective (gloo aborts it then)
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
    # The HF Trainer's DDP model still holds the group: freed when this function returns,
    # with the GIL held, its destructor joins gloo's worker thread, which may still wait for
    # the GIL to drop the barrier's tensors (a hang seen in CI). Release the GIL first.
    time.sleep(_GLOO_GRACE_S)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_one_rank_nan_is_named_on_that_rank_and_nothing_hangs(tmp_path):
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=WORLD, join=True)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(WORLD)]
    assert [r["world"] for r in ranks] == [WORLD, WORLD]
    assert ranks[1]["step"] == 1 and ranks[1]["module"] == "transformer.h.1.mlp.c_fc"
    # rank 0's own weights were finite at step 1; the all-reduced NaN gradients reach them
    assert ranks[0]["step"] == 2 and ranks[0]["finding_step"] == 2 and ranks[0]["module"]
