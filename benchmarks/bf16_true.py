"""Pure bf16 (bf16-true) on the CPU: memory per parameter and the built-in GPT's final loss.

Memory: bytes of weights + gradients + optimizer state (AdamW) per parameter after one step,
for fp32, bf16-mixed and bf16-true (none / kahan / stochastic), on the built-in GPT with the
default keep-fp32 modules and with everything in bf16. Final loss: ``ampkit.train`` of the
built-in GPT in bf16-mixed and bf16-true with each compensation; the variants of one
learning rate run as separate processes, two at a time (one thread each).

    python benchmarks/bf16_true.py memory
    python benchmarks/bf16_true.py loss --steps 300 --batch-size 8 --seq-len 64 --lr 2e-3
    python benchmarks/bf16_true.py loss --lr 2e-4 --variants fp32,bf16-true:none
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import torch


def bytes_per_parameter(precision: str, compensation: str | None, keep: tuple | None) -> float:
    from ampkit import MixedPrecision
    from ampkit.models.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=256, block_size=128, n_layer=2, n_head=4, n_embd=128))
    kwargs = {}
    if precision == "bf16-true":
        kwargs = {"update_compensation": compensation, "bf16_true_keep_fp32": keep}
    mp = MixedPrecision(precision, "cpu", **kwargs)
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
        ("fp32", "fp32", None, None),
        ("bf16-mixed", "bf16", None, None),
        ("bf16-true, none", "bf16-true", "none", None),
        ("bf16-true, kahan", "bf16-true", "kahan", None),
        ("bf16-true, stochastic", "bf16-true", "stochastic", None),
        ("bf16-true, none, nothing kept fp32", "bf16-true", "none", ()),
        ("bf16-true, kahan, nothing kept fp32", "bf16-true", "kahan", ()),
    ]
    print("| variant | bytes per parameter (weights + grads + AdamW state) |")
    print("|---|---|")
    for name, precision, comp, keep in rows:
        print(f"| {name} | {bytes_per_parameter(precision, comp, keep):.2f} |")


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
        update_compensation=args.compensation,
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


def loss(args: argparse.Namespace) -> None:
    variants = [
        (v.split(":")[0], v.split(":")[1] if ":" in v else None) for v in args.variants.split(",")
    ]
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
    parser.add_argument("what", choices=["memory", "loss", "one"])
    parser.add_argument("--precision", default="bf16")
    parser.add_argument("--compensation", default=None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument(
        "--variants",
        default="fp32,bf16,bf16-true:none,bf16-true:kahan,bf16-true:stochastic",
        help="precision[:compensation], comma-separated",
    )
    args = parser.parse_args()
    {"memory": lambda: memory(), "loss": lambda: loss(args), "one": lambda: one_run(args)}[
        args.what
    ]()


if __name__ == "__main__":
    main()
