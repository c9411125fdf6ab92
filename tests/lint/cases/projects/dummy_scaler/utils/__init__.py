from .scaling import HalvingScaler, IdentityScaler

__all__ = ["HalvingScaler", "IdentityScaler"]
