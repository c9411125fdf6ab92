"""Pure bf16 (bf16-true) on the CPU: memory per parameter, the built-in GPT's final loss, and
a long run of optimizer-state drift.

Memory: bytes of weights + gradients + optimizer state (AdamW) per parameter after one step,
for fp32, bf16-mixed and bf16-true (none / kahan / stochastic), on the built-in GPT with the
default keep-fp32 modules and with everything in bf16. Final loss: ``ampkit.train`` of the
built-in GPT in bf16-mixed and bf16-true with each compensation; the variants of one
learning rate run as separate processes, two at a time (one thread each).

    python benchmarks/bf16_true.py memory
    python benchmarks/bf16_true.py loss --steps 300 --batch-size 8 --seq-len 64 --lr 2e-3
    python benchmarks/bf16_true.py loss --lr 2e-4 --variants fp32,bf16-true:none
    python benchmarks/bf16_true.py long --steps 5000 --batch-size 4 --seq-len 32 --lr 1e-3
    python benchmarks/bf16_true.py drift

Drift (``drift``): an MLP of two 64x64 bf16 Linears, kahan weights, AdamW (lr 1e-4, betas
0.9, 0.999), 2,000 steps on random minibatches of 32 from a fixed set of 256 inputs, for each
``state_precision``: the first Linear's stored ``exp_avg_sq`` (plus its residual under
bf16-kahan) over the exact float64 EMA of the gradients it saw, per element.

Long run (``long``): the built-in GPT (2 layers, width 64) trained with AdamW (betas 0.9,
0.999) for ``--steps`` steps on the byte corpus in fp32, bf16-mixed and bf16-true (kahan
weights) with each ``state_precision``, one process per variant, two at a time (one thread
each). Beside the final loss (mean of the last 100 steps) it tracks, in float64, the exact EMA
of the squared gradients each optimizer saw (``beta2 * v + (1 - beta2) * g**2``) and reports
the stored ``exp_avg_sq`` over it: median and 10-90% over all elements, at the end.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch


def bytes_per_parameter(
    precision: str, compensation: str | None, keep: tuple | None, state: str = "fp32"
) -> float:
    from ampkit import Bf16True, MixedPrecision
    from ampkit.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, n_embd=128))
    if precision == "bf16-true":
        mode = Bf16True(update_compensation=compensation, keep_fp32=keep, state_precision=state)
        mp = MixedPrecision(mode, "cpu")
    else:
        mp = MixedPrecision(precision, "cpu")
    model = mp.prepare_model(model)
    opt = mp.prepare_optimizer(torch.optim.AdamW(model.parameters(), lr=1e-3))
    x = torch.randint(0, 256, (2, 128))
    with mp.autocast():
        _, loss = model(x, x)
    mp.backward(loss)
    # the state after one step, with the gradients of the next backward in place
    opt.step()
    with mp.autocast():
        _, loss = model(x, x)
    loss.backward()
    params = list(model.parameters())
    total = sum(p.numel() * p.element_size() for p in params)
    total += sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
    for state in opt.state.values():
        total += sum(
            v.numel() * v.element_size()
            for k, v in state.items()
            if torch.is_tensor(v) and k != "step"
        )
    return total / sum(p.numel() for p in params)


def memory() -> None:
    import warnings

    from ampkit.errors import PrecisionWarning

    warnings.simplefilter("ignore", PrecisionWarning)
    rows = [
        ("fp32", "fp32", None, None, "fp32"),
        ("bf16-mixed", "bf16", None, None, "fp32"),
        ("bf16-true, kahan, state fp32 (default)", "bf16-true", "kahan", None, "fp32"),
        ("bf16-true, kahan, state bf16-stochastic", "bf16-true", "kahan", None, "bf16-stochastic"),
        ("bf16-true, kahan, state bf16-kahan", "bf16-true", "kahan", None, "bf16-kahan"),
        ("bf16-true, kahan, state bf16", "bf16-true", "kahan", None, "bf16"),
        (
            "bf16-true, stochastic, state bf16-stochastic",
            "bf16-true",
            "stochastic",
            None,
            "bf16-stochastic",
        ),
        ("bf16-true, none, state bf16", "bf16-true", "none", None, "bf16"),
        ("bf16-true, kahan, state fp32, nothing kept fp32", "bf16-true", "kahan", (), "fp32"),
        (
            "bf16-true, stochastic, state bf16-stochastic, nothing kept fp32",
            "bf16-true",
            "stochastic",
            (),
            "bf16-stochastic",
        ),
    ]
    print("| variant | bytes per parameter (weights + grads + AdamW state + compensation) |")
    print("|---|---|")
    for name, precision, comp, keep, state in rows:
        print(f"| {name} | {bytes_per_parameter(precision, comp, keep, state):.2f} |")


def one_run(args: argparse.Namespace) -> None:
    import warnings

    from ampkit import TrainConfig, train
    from ampkit.errors import PrecisionWarning

    warnings.simplefilter("ignore", PrecisionWarning)
    torch.set_num_threads(1)
    lost: list[float] = []
    config = TrainConfig(
        precision=args.precision,
        device="cpu",
        steps=args.steps,
        batch_size=args.batch_size,
        seq_len=args.seq_len,
        lr=args.lr,
        mode_options={"update_compensation": args.compensation},
        log_every=10,
    )
    start = time.perf_counter()
    summary = train(
        config, callbacks=[lambda m: m.lost_updates is not None and lost.append(m.lost_updates)]
    )
    print(
        json.dumps(
            {
                "final_loss": summary.final_loss,
                "wall_s": time.perf_counter() - start,
                "lost_updates_mean": sum(lost) / len(lost) if lost else None,
                "lost_updates_last": lost[-1] if lost else None,
            }
        )
    )


def drift() -> None:
    import warnings

    from ampkit import CompensatedOptimizer
    from ampkit.errors import PrecisionWarning
    from ampkit.precision.bf16_true.compensated import STATE_PRECISIONS

    warnings.simplefilter("ignore", PrecisionWarning)
    print("| state_precision | stored exp_avg_sq / exact EMA: median | mean | 10-90% | wall s |")
    print("|---|---|---|---|---|")
    for state in STATE_PRECISIONS:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64)
        ).to(torch.bfloat16)
        opt = CompensatedOptimizer(
            torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999)),
            "kahan",
            state_precision=state,  # type: ignore[arg-type]
        )
        weight = model[0].weight
        exact = torch.zeros(weight.shape, dtype=torch.float64)
        inputs = torch.randn(256, 64, dtype=torch.bfloat16)
        start = time.perf_counter()
        for _ in range(2000):
            model(inputs[torch.randint(0, 256, (32,))]).float().pow(2).mean().backward()
            exact.mul_(0.999).add_(weight.grad.double() ** 2, alpha=0.001)
            opt.step()
            opt.zero_grad()
        st = opt.state[weight]
        stored = st["exp_avg_sq"].double()
        if "exp_avg_sq_compensation" in st:
            stored = stored + st["exp_avg_sq_compensation"].double()
        r = (stored / exact).flatten()
        print(
            f"| {state} | {r.median().item():.4f} | {r.mean().item():.4f} | "
            f"{r.quantile(0.1).item():.4f}-{r.quantile(0.9).item():.4f} | "
            f"{time.perf_counter() - start:.0f} |"
        )


LONG_VARIANTS = (
    "fp32",
    "bf16",
    "bf16-true:fp32",
    "bf16-true:bf16-stochastic",
    "bf16-true:bf16-kahan",
    "bf16-true:bf16",
)


def long_one(args: argparse.Namespace) -> None:
    """One variant of the long run; prints one JSON line."""
    import warnings

    from ampkit import Bf16True, MixedPrecision
    from ampkit.errors import PrecisionWarning
    from ampkit.models.corpus import load_corpus
    from ampkit.models.gpt import GPT, GPTConfig

    warnings.simplefilter("ignore", PrecisionWarning)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    corpus = load_corpus()
    model = GPT(GPTConfig(vocab_size=256, block_size=args.seq_len, n_layer=2, n_head=2, n_embd=64))
    precision, _, state = args.variant.partition(":")
    mp = MixedPrecision(Bf16True(state_precision=state) if state else precision, "cpu")
    model = mp.prepare_model(model)
    beta2 = 0.999
    opt = mp.prepare_optimizer(
        torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, beta2), weight_decay=0.0)
    )
    params = [p for p in model.parameters() if p.requires_grad]
    exact = {id(p): torch.zeros(p.shape, dtype=torch.float64) for p in params}
    losses: list[float] = []
    start = time.perf_counter()
    for step in range(args.steps):
        x, y = corpus.batch(step, args.batch_size, args.seq_len)
        with mp.autocast():
            _, loss = model(x, y)
        mp.backward(loss)
        for p in params:  # what the optimizer sees: the gradient in fp32
            if p.grad is not None:
                g = p.grad.double()
                exact[id(p)].mul_(beta2).add_(g * g, alpha=1 - beta2)
        mp.step(opt)
        losses.append(loss.item())
    wall = time.perf_counter() - start
    ratios = []
    for p in params:
        st = opt.state[p]
        stored = st["exp_avg_sq"].double()
        if "exp_avg_sq_compensation" in st:
            stored = stored + st["exp_avg_sq_compensation"].double()
        ref = exact[id(p)]
        keep = ref > 0
        ratios.append((stored[keep] / ref[keep]).flatten())
    ratio = torch.cat(ratios)
    bf16_ratio = torch.cat(
        [r for p, r in zip(params, ratios, strict=True) if p.dtype == torch.bfloat16]
        or [torch.ones(1, dtype=torch.float64)]
    )
    tail = losses[-100:]
    print(
        json.dumps(
            {
                "final_loss": sum(tail) / len(tail),
                "ratio_median": ratio.median().item(),
                "ratio_q10": ratio.quantile(0.1).item() if ratio.numel() < 2**24 else None,
                "ratio_q90": ratio.quantile(0.9).item() if ratio.numel() < 2**24 else None,
                "bf16_ratio_median": bf16_ratio.median().item(),
                "wall_s": wall,
            }
        )
    )


def long(args: argparse.Namespace) -> None:
    variants = args.variants.split(",") if args.variants else list(LONG_VARIANTS)
    common = ["--steps", str(args.steps), "--batch-size", str(args.batch_size)]
    common += ["--seq-len", str(args.seq_len), "--lr", str(args.lr)]
    results = {}
    for i in range(0, len(variants), 2):
        procs = [
            (
                v,
                subprocess.Popen(
                    [sys.executable, __file__, "long-one", "--variant", v, *common],
                    stdout=subprocess.PIPE,
                    text=True,
                ),
            )
            for v in variants[i : i + 2]
        ]
        for v, proc in procs:
            out, _ = proc.communicate()
            results[v] = json.loads(out.strip().splitlines()[-1])
    print(
        f"steps {args.steps}, batch {args.batch_size} x {args.seq_len}, lr {args.lr}, "
        "AdamW betas (0.9, 0.999)"
    )
    print(
        "| variant | final loss (last 100 steps) | stored exp_avg_sq / exact EMA: median "
        "(10-90%) | bf16 parameters only: median | wall s |"
    )
    print("|---|---|---|---|---|")
    for v, r in results.items():
        print(
            f"| {v} | {r['final_loss']:.4f} | {r['ratio_median']:.4f} "
            f"({r['ratio_q10']:.3f}-{r['ratio_q90']:.3f}) | {r['bf16_ratio_median']:.4f} | "
            f"{r['wall_s']:.0f} |"
        )


def loss(args: argparse.Namespace) -> None:
    given = args.variants or "fp32,bf16,bf16-true:none,bf16-true:kahan,bf16-true:stochastic"
    variants = [(v.split(":")[0], v.split(":")[1] if ":" in v else None) for v in given.split(",")]
    common = [
        "--steps",
        str(args.steps),
        "--batch-size",
        str(args.batch_size),
        "--seq-len",
        str(args.seq_len),
        "--lr",
        str(args.lr),
    ]
    results = {}
    for i in range(0, len(variants), 2):
        procs = []
        for precision, comp in variants[i : i + 2]:
            cmd = [sys.executable, __file__, "one", "--precision", precision, *common]
            if comp:
                cmd += ["--compensation", comp]
            procs.append(
                ((precision, comp), subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True))
            )
        for key, proc in procs:
            out, _ = proc.communicate()
            results[key] = json.loads(out.strip().splitlines()[-1])
    print(f"steps {args.steps}, batch {args.batch_size} x {args.seq_len}, lr {args.lr}")
    print(
        "| precision | update compensation | final loss | lost updates (mean of logged steps) | wall s |"
    )
    print("|---|---|---|---|---|")
    for (precision, comp), r in results.items():
        lost = "-" if r["lost_updates_mean"] is None else f"{100 * r['lost_updates_mean']:.2f}%"
        print(
            f"| {precision} | {comp or '-'} | {r['final_loss']:.4f} | {lost} | {r['wall_s']:.0f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["memory", "loss", "one", "long", "long-one", "drift"])
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--compensation", default=None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--variants",
        default=None,
        help="loss: precision[:compensation] (default: fp32, bf16, bf16-true with each "
        "compensation); long: precision or bf16-true:<state precision> (default: all); "
        "comma-separated",
    )
    args = parser.parse_args()
    {
        "memory": lambda: memory(),
        "loss": lambda: loss(args),
        "one": lambda: one_run(args),
        "long": lambda: long(args),
        "long-one": lambda: long_one(args),
        "drift": lambda: drift(),
    }[args.what]()


if __name__ == "__main__":
    main()
