import torch

AMP_DTYPE = torch.float16


class Config:
    dtype = torch.bfloat16
    lr = 3e-4
