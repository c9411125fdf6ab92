# The deprecated custom_fwd / custom_bwd decorators of autograd functions.
import torch
from torch.cuda.amp import custom_bwd, custom_fwd  # expect: AMP006


class Scale(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)  # expect: AMP006
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    @torch.cuda.amp.custom_bwd  # expect: AMP006
    def backward(ctx, grad):
        return grad * ctx.factor, None


class Square(torch.autograd.Function):
    @staticmethod
    @custom_fwd  # expect: AMP006
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    @custom_bwd  # expect: AMP006
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad
