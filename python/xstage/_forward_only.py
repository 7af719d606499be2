"""The custom ops have no backward. Their tensor arguments are detached at the call, so that an output never
requires grad: eager and compiled calls then agree (eager PyTorch would fail only at .backward(), while
AOTAutograd traces the backward when it compiles and fails there, e.g. under a model's trainable gate with
grad enabled). No gradient flows through these ops."""


def detached(*tensors):
    return tuple(t.detach() if t is not None else None for t in tensors)
