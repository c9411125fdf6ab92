"""Helpers of another module: one steps and updates the scaler it is handed, one only logs."""


def step_and_log_diff(scaler, opt, model, prefix):
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()


def log_grads(model, prefix):
    return {prefix: sum(p.grad.norm() for p in model.parameters() if p.grad is not None)}
