"""Every rule is near-linear in the size of a file.

A script with hundreds of module-level training loops used to take time growing with the
cube of the loop count. The generated files below mix the shapes the rules look at
(loops, accumulation guards, branches, helpers followed into, classes). The default test
checks that a long file's findings are its blocks' findings; the tests timed in CPU seconds
of this thread are marked ``timing`` (deselected by default: a measured time is not a
verdict to hold a CI run to).
"""

from __future__ import annotations

import gc
import time

import pytest

from ampkit.lint import check_source

_HEAD = """import torch
scaler = torch.amp.GradScaler("cuda")


def helper_step(loss):
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""

_BLOCKS = [
    """
for i, (x, y) in enumerate(loader):
    with torch.autocast("cuda", dtype=torch.float16):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.zero_grad()
    scaler.step(optimizer)
    scaler.update()
""",
    """
for step, batch in enumerate(loader):
    scaler.scale(model(batch)).backward()
    scaler.unscale_(optimizer)
    if (step + 1) % accum == 0:
        scaler.step(optimizer)
        scaler.update()
    optimizer.step()
""",
    """
for batch in loader:
    if use_amp:
        helper_step(model(batch))
    else:
        model(batch).backward()
        optimizer.step()
    for opt in optimizers:
        opt.zero_grad()
""",
    """
class Trainer{n}:
    def __init__(self):
        self.scaler = torch.amp.GradScaler("cuda")

    def backward(self, loss):
        self.scaler.scale(loss).backward()

    def fit(self, loader):
        for batch in loader:
            self.backward(self.model(batch))
            self.scaler.step(self.optimizer)
            self.scaler.update()
""",
]


def generate(lines: int) -> str:
    """A syntactically valid file of about ``lines`` lines."""
    return _generate(lines)[0]


def _generate(lines: int) -> tuple[str, int]:
    """The file of :func:`generate` and the number of blocks in it."""
    parts = [_HEAD]
    count = _HEAD.count("\n")
    n = 0
    while count < lines:
        block = _BLOCKS[n % len(_BLOCKS)].replace("{n}", str(n))
        parts.append(block)
        count += block.count("\n")
        n += 1
    return "".join(parts), n


def _cpu_seconds(text: str, repeat: int = 1) -> tuple[float, int]:
    """CPU seconds of this thread (other threads of the test process, such as torch's, do not
    count), the fastest of ``repeat`` runs, and the number of findings."""
    best, found = float("inf"), 0
    gc.collect()
    gc.disable()  # a full collection of the test session's heap is not the linter's cost
    try:
        for _ in range(repeat):
            start = time.thread_time()
            found = len(check_source(text, "generated.py"))
            best = min(best, time.thread_time() - start)
    finally:
        gc.enable()
    return best, found


def test_every_bad_block_of_a_long_file_is_reported() -> None:
    # each kind of block alone, then a file of 200 blocks: a long file skips nothing
    head = len(check_source(_HEAD, "head.py"))
    alone = [len(check_source(_HEAD + b.replace("{n}", "0"), "one.py")) - head for b in _BLOCKS]
    text, blocks = _generate(2000)
    assert blocks > 200 and sum(alone) > 0
    expected = head + sum(alone[n % len(_BLOCKS)] for n in range(blocks))
    assert len(check_source(text, "generated.py")) == expected


@pytest.mark.timing  # CPU seconds measured: deselected by default
def test_five_thousand_line_file_lints_in_seconds() -> None:
    text = generate(5000)
    assert text.count("\n") >= 5000
    seconds, found = _cpu_seconds(text)
    assert found > 300  # the bad blocks are all reported: nothing was skipped
    # about 1.5 CPU seconds on the 2-core development machine
    assert seconds < 6, f"linting 5,000 lines took {seconds:.1f} CPU seconds"


@pytest.mark.timing  # a ratio of CPU seconds: deselected by default
def test_cost_grows_linearly_with_loops() -> None:
    small, found_small = _cpu_seconds(generate(1000), repeat=3)
    large, found_large = _cpu_seconds(generate(5000), repeat=2)
    assert found_large > 4 * found_small
    # five times the code: well under the 25x of a quadratic rule (allowing for noise)
    assert large < 10 * max(small, 0.05), f"1,000 lines: {small:.2f}s, 5,000 lines: {large:.2f}s"
