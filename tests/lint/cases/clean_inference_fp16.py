"""fp16 used only for inference: no backward, so no scaler is needed."""
import torch

model = load_model().cuda().eval()
model.half()

with torch.inference_mode():
    for batch in loader:
        logits = model(batch.cuda().half())
        preds = logits.argmax(-1)


def predict(texts):
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        return model(tokenize(texts)).softmax(-1)
