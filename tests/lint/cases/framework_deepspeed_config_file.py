"""DeepSpeed configured from a file (fp16 may be enabled there, and then the engine scales
the loss itself) or with fp16 enabled in the code: not reported."""
import deepspeed
import torch

engine, _, _, _ = deepspeed.initialize(args=args, model=build_model(), config=args.deepspeed_config)
other, _, _, _ = deepspeed.initialize(model=build_model(), config={"fp16": {"enabled": True}})

for x, y in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        loss = torch.nn.functional.cross_entropy(engine(x), y)
    engine.backward(loss)
    engine.step()
