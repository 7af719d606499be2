"""Every xstage op is forward only (no backward). Its tensor arguments are detached at the call, so that an output
never requires grad and eager and compiled calls agree: eager PyTorch would fail only at .backward(), while
AOTAutograd traces the backward when it compiles and fails there (e.g. under a model's trainable gate with grad
enabled). So no gradient flows through these ops; an eager call with grad enabled on an input that requires grad
says so once per op (a warning, not an error: inference under a model's default grad mode is the common case)."""
import warnings

import torch

_warned = set()


def detached(op, *tensors):
    if op not in _warned and not torch.compiler.is_compiling() and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in tensors):
        _warned.add(op)
        warnings.warn(f"{op}: forward only: no gradient flows through it to its inputs (run it under "
                      "torch.no_grad() or torch.inference_mode() to silence this)", stacklevel=3)
    return tuple(t.detach() if t is not None else None for t in tensors)
