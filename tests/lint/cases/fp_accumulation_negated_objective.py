"""Micro-batches whose objective is divided by the token count of the whole batch, then
negated into the loss (``loss = -obj``): the division reaches the backward, nothing to
report."""


def update_policy(model, optimizer, episodes, micro_batch_size):
    num_target_tokens = sum(len(e.tokens) for e in episodes)
    for i in range(0, len(episodes), micro_batch_size):
        batch = episodes[i : i + micro_batch_size]
        obj = model(batch)
        obj = obj.sum() / num_target_tokens
        loss = -obj
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
