"""A throughput benchmark: the training loop runs at module level, is timed, and nothing it
trains is kept (no save, checkpoint, state_dict or write). float16 is only the fallback on
GPUs without bfloat16; underflowed gradients do not change the time it measures."""
import time

import torch

from model import GPT

dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
ptdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = torch.autocast("cuda", dtype=ptdtype)

model = GPT().cuda()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
x = torch.randint(50304, (12, 1024), device="cuda")
for stage, num_steps in enumerate([10, 20]):
    torch.cuda.synchronize()
    t0 = time.time()
    for k in range(num_steps):
        with ctx:
            logits, loss = model(x, x)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    torch.cuda.synchronize()
    print(f"time per iteration: {(time.time() - t0) / num_steps * 1000:.4f}ms")
