"""The ops' forward-only boundary (xstage/_forward_only.py), on the CPU: inputs detached, one warning an op where
grad is enabled on an input that requires it, none under no_grad or for inputs that need no grad."""
import warnings

import pytest
import torch

from xstage import _forward_only


def test_inputs_are_detached_and_none_passes_through():
    a = torch.ones(3, requires_grad=True)
    b = torch.zeros(2)
    with torch.no_grad():
        da, db, dn = _forward_only.detached("xstage.test_op_a", a, b, None)
    assert not da.requires_grad and dn is None and db is not None
    assert da.data_ptr() == a.data_ptr()  # a view, not a copy


def test_one_warning_an_op_when_grad_would_be_lost():
    a = torch.ones(3, requires_grad=True)
    with pytest.warns(UserWarning, match=r"xstage.test_op_b: forward only: no gradient flows"):
        _forward_only.detached("xstage.test_op_b", a)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _forward_only.detached("xstage.test_op_b", a)  # said once
        with torch.no_grad():
            _forward_only.detached("xstage.test_op_c", a)  # no grad mode: nothing lost
        _forward_only.detached("xstage.test_op_d", torch.ones(3))  # nothing requires grad
