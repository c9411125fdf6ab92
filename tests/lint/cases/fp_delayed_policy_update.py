"""Actor-critic training with a delayed actor update: the critic is stepped right after its
own backward every iteration; only the actor waits for `delay` iterations. Nothing is
accumulated, so there is no loss to divide."""
import torch

critic_opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
actor_opt = torch.optim.Adam(actor.parameters(), lr=1e-4)

for it, batch in enumerate(replay):
    value_loss = (critic(batch.obs, batch.act) - batch.target).pow(2).mean()
    critic_opt.zero_grad()
    value_loss.backward()
    critic_opt.step()

    if it % delay == 0:
        policy_loss = -critic(batch.obs, actor(batch.obs)).mean()
        actor_opt.zero_grad()
        policy_loss.backward()
        actor_opt.step()

# real accumulation next to a per-iteration step: the second model is stepped every n
for it, batch in enumerate(loader):
    first_loss = model_a(batch).mean()
    first_loss.backward()
    opt_a.step()
    opt_a.zero_grad()
    second_loss = model_b(batch).mean()
    second_loss.backward()  # expect: AMP011
    if (it + 1) % n == 0:
        opt_b.step()
        opt_b.zero_grad()
