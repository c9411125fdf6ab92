"""A DeepSpeed engine configured in the code without fp16, and fp16 autocast by hand:
engine.backward does not scale the loss. engine.step() is the optimizer step."""
import deepspeed
import torch

config = {"train_batch_size": 32, "optimizer": {"type": "Adam", "params": {"lr": 1e-4}}}
model_engine, optimizer, _, _ = deepspeed.initialize(
    model=build_model(), model_parameters=params, config={"train_batch_size": 32}
)

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        loss = torch.nn.functional.cross_entropy(model_engine(x), y)
    model_engine.backward(loss)
    model_engine.step()
