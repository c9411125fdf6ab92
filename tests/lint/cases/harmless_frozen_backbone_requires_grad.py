"""A frozen encoder (requires_grad_(False)) runs in fp16 autocast; the head it feeds is
trained in fp32 outside autocast. No trained weight gets an fp16 gradient."""
import torch

encoder.requires_grad_(False)
for p in text_tower.parameters():
    p.requires_grad = False
head = torch.nn.Linear(512, 2).cuda()
optimizer = torch.optim.AdamW(head.parameters())

for images, tokens, labels in loader:
    with torch.autocast("cuda", dtype=torch.float16):
        image_features = encoder(images)
        text_features = text_tower.encode(tokens)
    logits = head(torch.cat([image_features, text_features], -1).float())
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

# the head itself under fp16 autocast: trained weights get fp16 gradients, no scaler
for images, tokens, labels in loader:
    with torch.autocast("cuda", dtype=torch.float16):  # expect: AMP002
        logits = head(encoder(images))
    loss = torch.nn.functional.cross_entropy(logits, labels)
    loss.backward()
    optimizer.step()
