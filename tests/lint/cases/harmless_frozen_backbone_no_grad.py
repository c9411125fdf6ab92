"""Linear probe: the frozen backbone runs in fp16 autocast under no_grad (nothing there is
differentiated), the trained head runs in fp32 outside autocast. No GradScaler is needed."""
import torch

backbone.eval()
head = torch.nn.Linear(768, 10).cuda()
optimizer = torch.optim.SGD(head.parameters(), lr=0.1)


@torch.no_grad()
def embed(images):
    with torch.autocast("cuda", dtype=torch.float16):
        return backbone(images)


for images, labels in loader:
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        features = backbone(images)
    loss = torch.nn.functional.cross_entropy(head(features.float()), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

for images, labels in loader:
    with torch.inference_mode():
        with torch.autocast("cuda", dtype=torch.float16):
            features = embed(images)
    loss = torch.nn.functional.cross_entropy(head(features.float().clone()), labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

# the same probe, but the head is trained under fp16 autocast: a real fp16 backward
for images, labels in loader:
    with torch.no_grad():
        features = backbone(images)
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        loss = torch.nn.functional.cross_entropy(head(features), labels)
    loss.backward()
    optimizer.step()
