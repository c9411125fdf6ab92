import contextlib
import warnings

import torch

NEW_API = hasattr(torch, "amp")


@contextlib.contextmanager
def amp_context(device_type="cuda", **options):
    """autocast through whichever API this torch has; options pass straight on."""
    if NEW_API:
        with torch.amp.autocast(device_type=device_type, **options):
            yield
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with torch.cuda.amp.autocast(**options):
                yield
