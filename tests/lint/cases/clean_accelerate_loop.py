"""An HF Accelerate loop: the accelerator owns the scaler, accumulation and clipping."""
import torch
from accelerate import Accelerator

accelerator = Accelerator(mixed_precision="fp16", gradient_accumulation_steps=4)
model = build_model()
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)

for epoch in range(3):
    model.train()
    for step, batch in enumerate(loader):
        with accelerator.accumulate(model):
            outputs = model(**batch)
            loss = outputs.loss
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

# manual accumulation with Accelerate: accelerator.backward divides the loss itself
for step, batch in enumerate(loader):
    loss = model(**batch).loss
    accelerator.backward(loss)
    if (step + 1) % 4 == 0:
        optimizer.step()
        optimizer.zero_grad()
accelerator.save_state("out")
