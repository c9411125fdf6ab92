import torch
import torch.nn.functional as F


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x, targets, reduction: str = "sum"):
        return F.cross_entropy(self.proj(x), targets, reduction=reduction)
