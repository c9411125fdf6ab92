# Libraries that support old and new PyTorch pick the API by version or feature checks.
# The old arm only runs on an old torch: AMP006 stays silent and --fix leaves it alone.
import torch

try:
    from torch.amp import custom_fwd
except ImportError:
    from torch.cuda.amp import custom_fwd

if hasattr(torch.amp, "GradScaler"):
    scaler = torch.amp.GradScaler("cuda")
else:
    scaler = torch.cuda.amp.GradScaler()

NEW_TORCH = parse(torch.__version__) >= parse("2.4")
backup = torch.amp.GradScaler("cuda") if NEW_TORCH else torch.cuda.amp.GradScaler()
scaler_type = torch.amp.GradScaler if NEW_TORCH else torch.cuda.amp.GradScaler

try:
    amp_scaler = torch.amp.GradScaler(device="cuda")
except (AttributeError, TypeError):
    amp_scaler = torch.cuda.amp.GradScaler()


class Gelu(torch.autograd.Function):
    @staticmethod
    @custom_fwd(device_type="cuda")
    def forward(ctx, x):
        return x


# an unconditional use is still reported
legacy = torch.cuda.amp.GradScaler()  # expect: AMP006
