"""Eval metrics: exact over the whole eval set (closed form), in FitResult, the metrics rows,
the trackers' values and Callback.on_eval; under DDP the sums of every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from gloo_group import gloo_group
from torch import nn

import ampkit
from ampkit import Callback, ConfigurationError, DataError, EvalConfig, LoggingConfig, Trainer
from ampkit.trainer.loggers import metric_values


class Echo(nn.Module):
    """The batch's ``x`` is the logits, times a weight of 1: the predictions are known."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(()))

    def forward(self, x, labels):
        logits = x * self.weight
        return {"loss": nn.functional.cross_entropy(logits, labels), "logits": logits}


def batch(predicted: list[int], labels: list[int], classes: int = 3) -> dict:
    x = nn.functional.one_hot(torch.tensor(predicted), classes).float()
    return {"x": x, "labels": torch.tensor(labels)}


# 4 right of 4, 4 right of 4, 0 right of 1: exactly 8/9 (the mean of batch means is 2/3)
EVAL = [batch([0, 1, 2, 0], [0, 1, 2, 0]), batch([1, 1, 2, 2], [1, 1, 2, 2]), batch([0], [2])]


def make(model=None, **kwargs) -> Trainer:
    model = model or Echo()
    options = dict(max_steps=1, precision="fp32", device="cpu")
    options.update(kwargs)
    return Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), **options)


def test_accuracy_is_exact_over_batches_of_unequal_size():
    result = make().evaluate_metrics(EVAL, {"accuracy": ampkit.accuracy})
    assert result.metrics == {"accuracy": 8 / 9}
    assert result.batches == 3 and result.step == 0
    losses = [nn.functional.cross_entropy(b["x"], b["labels"]).item() for b in EVAL]
    assert result.loss == pytest.approx(sum(losses) / 3, rel=1e-6)
    assert make().evaluate(EVAL) == pytest.approx(result.loss, rel=1e-6)


def test_accuracy_of_token_logits_skips_the_ignored_label():
    logits = nn.functional.one_hot(torch.tensor([[0, 1, 2], [2, 2, 0]]), 3).float()
    labels = torch.tensor([[0, 2, -100], [2, -100, -100]])  # 2 right of 3 counted
    correct, counted = ampkit.accuracy({"logits": logits}, {"labels": labels})
    assert (int(correct), int(counted)) == (2, 3)
    # (inputs, targets) batches and plain logits work too
    correct, counted = ampkit.accuracy(logits[0], (None, torch.tensor([0, 1, 1])))
    assert (int(correct), int(counted)) == (2, 3)


def test_custom_metric_sums_totals_and_counts():
    def mean_top_logit(outputs, batch):  # a Python number and a tensor are both fine
        return outputs["logits"].max(dim=-1).values.sum(), len(batch["labels"])

    result = make().evaluate_metrics(EVAL, {"top": mean_top_logit})
    assert result.metrics == {"top": 1.0}


@pytest.mark.parametrize(
    ("metric", "error", "match"),
    [
        (lambda o, b: 0.5, ConfigurationError, "returned float, not \\(total, count\\)"),
        (
            lambda o, b: (o["logits"].argmax(-1) == b["labels"], 4),
            ConfigurationError,
            "its total is a tensor of shape \\(4,\\)",
        ),
        (lambda o, b: ("a", 1), ConfigurationError, "its total is a str"),
        (lambda o, b: (0, 0), DataError, "counted no item over the 3 eval batches"),
    ],
)
def test_a_metric_that_returns_the_wrong_thing_is_named(metric, error, match):
    with pytest.raises(error, match=f"eval metric 'bad': {match}"):
        make().evaluate_metrics(EVAL, {"bad": metric})


def test_empty_eval_data_is_refused_not_reported_as_a_loss():
    with pytest.raises(DataError, match="the eval data produced no batch"):
        make().evaluate([])


@pytest.mark.parametrize(
    ("metrics", "match"),
    [
        ({"loss": ampkit.accuracy}, "may not be named 'loss'"),
        ({"acc": 3}, "metric 'acc' is a int, not a function"),
        ({"top 1": ampkit.accuracy}, "metric name 'top 1' is invalid"),
        ([ampkit.accuracy], "metrics=list is invalid"),
    ],
)
def test_eval_config_refuses_bad_metrics(metrics, match):
    with pytest.raises(ConfigurationError, match=match):
        EvalConfig(every=1, data=EVAL, metrics=metrics)


def test_accuracy_names_shapes_that_do_not_go_together():
    with pytest.raises(ConfigurationError, match="logits of shape \\(4, 3\\) do not go with"):
        ampkit.accuracy(torch.zeros(4, 3), {"labels": torch.zeros(4, 2).long()})
    with pytest.raises(ConfigurationError, match="found no labels in the batch"):
        ampkit.accuracy(torch.zeros(4, 3), {"input_ids": torch.zeros(4).long()})


def test_eval_results_go_to_fit_result_metrics_rows_trackers_and_on_eval(tmp_path):
    seen: list[tuple[str, int, object]] = []

    class Watch(Callback):
        def on_eval(self, trainer, result):
            seen.append(("eval", trainer.step, result))

        def on_log(self, trainer, metrics):
            seen.append(("log", metrics.step, metric_values(metrics)))

    train = [batch([0, 1, 2, 0], [0, 2, 2, 1])] * 5
    trainer = make(
        max_steps=5,
        eval=EvalConfig(every=2, data=EVAL, metrics={"accuracy": ampkit.accuracy}),
        logging=LoggingConfig(log_every=3, metrics_file=tmp_path / "m.jsonl"),
        callbacks=[Watch()],
    )
    result = trainer.fit(train)
    history = result.eval_history
    assert [e.step for e in history] == [2, 4, 5]
    # the weight stays > 0, so the predictions, and the accuracy, stay those of EVAL
    assert [e.metrics for e in history] == [{"accuracy": 8 / 9}] * 3
    assert result.last_eval == history[-1] == trainer.evaluate_metrics(EVAL)

    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 3, 4, 5]
    evaluated = [r for r in rows if "eval_loss" in r]
    assert [r["step"] for r in evaluated] == [2, 4, 5]
    assert all("eval_accuracy" not in r for r in rows if "eval_loss" not in r)
    for row, evaluation in zip(evaluated, history, strict=True):
        assert row["eval_accuracy"] == 8 / 9 and row["eval_loss"] == evaluation.loss

    evals = [item for item in seen if item[0] == "eval"]
    assert [(step, r) for _, step, r in evals] == [(e.step, e) for e in history]
    # on_eval comes before the step's on_log, whose values carry the metric
    kinds = [(kind, step) for kind, step, _ in seen]
    assert kinds.index(("eval", 2)) == kinds.index(("log", 2)) - 1
    logged = dict((step, values) for kind, step, values in seen if kind == "log")
    assert logged[4]["eval_accuracy"] == 8 / 9 and "eval_accuracy" not in logged[3]


def test_eval_without_metrics_keeps_the_rows_as_they_were(tmp_path):
    trainer = make(
        max_steps=2,
        eval=EvalConfig(every=2, data=EVAL),
        logging=LoggingConfig(metrics_file=tmp_path / "m.jsonl"),
    )
    result = trainer.fit([batch([0], [0])] * 2)
    (row,) = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert not [key for key in row if key.startswith("eval_") and key != "eval_loss"]
    assert result.last_eval.metrics == {} and result.last_eval.step == 2


WORLD = 2
SHARDS = [EVAL[:2], EVAL[2:]]  # rank 0: 8 right of 8 in 2 batches; rank 1: 0 of 1 in 1


def _worker(rank: int, store: str, out: str) -> None:
    with gloo_group(rank, WORLD, store):
        result = make().evaluate_metrics(SHARDS[rank], {"accuracy": ampkit.accuracy})
        torch.save(result, Path(out) / f"rank{rank}.pt")


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.timeout(300)
def test_ddp_accuracy_is_the_sum_over_every_rank(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=WORLD, join=True)
    results = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]
    single = make().evaluate_metrics(EVAL, {"accuracy": ampkit.accuracy})
    for result in results:
        assert result.metrics == {"accuracy": 8 / 9}  # not (1 + 0) / 2
        assert result.batches == 3 and result.loss == pytest.approx(single.loss, rel=1e-6)
