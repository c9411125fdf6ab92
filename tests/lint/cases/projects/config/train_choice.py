"""The dtype is chosen from the command line; one choice is float16 and nothing scales."""
import torch

dtype = torch.float16 if args.precision == "fp16" else torch.bfloat16
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    with torch.autocast("cuda", dtype=dtype):  # expect: AMP002
        loss = model(x, y)
    loss.backward()
    optimizer.step()
