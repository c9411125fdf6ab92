from .net import Net

__all__ = ["Net"]
