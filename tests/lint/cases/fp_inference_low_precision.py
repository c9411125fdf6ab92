# fp16 or bf16 models built for inference or comparison are not training-loop bugs.
import copy

import torch


def test_fp16_inference_matches():
    net = Net().cuda().half()
    for batch in batches:
        with torch.autocast("cuda", dtype=torch.float16):
            out = net(batch.half())
        check(out)
    torch.save(net.state_dict(), "fp16.pt")


def compare_with_pure_bf16(net, optim, batches):
    pure = copy.deepcopy(net).to(torch.bfloat16)
    for batch in batches:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = net(batch).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        reference = pure(batch.bfloat16())
        report(loss, reference)


# casting the inputs that autocast then sees, in a training loop, is still reported
def train(net, optim, batches):
    for batch in batches:
        batch = batch.half()  # expect: AMP007
        with torch.autocast("cuda", dtype=torch.float16):
            loss = net(batch).mean()
        scaler.scale(loss).backward()
        scaler.step(optim)
        scaler.update()
