"""Fixtures of the Python package's tests.

GPU tests skip on a machine without enough GPUs, except where
XSTAGE_REQUIRE_GPU (scripts/device.sh sets it to the machine's GPU count)
says the machine has as many as the test needs: there it fails. The process group is made once per
session: NCCL over every rank under torchrun, else NCCL over one rank on a GPU
machine, else gloo over one rank (CPU tests only trace with fake tensors).
"""
import datetime
import os
import socket

import pytest
import torch
import torch.distributed as dist


def require_gpus(n=1):
    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if have >= n:
        return
    msg = f"needs {n} CUDA GPU(s), found {have}"
    required = os.environ.get("XSTAGE_REQUIRE_GPU", "").strip()
    if (int(required) if required.isdigit() else 0) >= n:  # the machine's GPU count, read as need_gpus.hpp does
        pytest.fail(f"{msg}, and XSTAGE_REQUIRE_GPU={required} says the GPUs are there")
    pytest.skip(msg)


def library_or_skip():
    """The loaded library; a test that needs it skips only where no library was
    asked for (XSTAGE_LIBRARY unset and the package has none beside it)."""
    from xstage import _lib
    if os.environ.get("XSTAGE_LIBRARY") or any(p.is_file() for p in _lib.library_candidates()):
        return _lib.lib()
    pytest.skip("libxstage_torch.so not built (pip install . or XSTAGE_LIBRARY)")


@pytest.fixture
def cuda():
    require_gpus(1)
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cuda", torch.cuda.current_device())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def group():
    """The default process group (see the module's docstring)."""
    if not dist.is_initialized():
        timeout = datetime.timedelta(seconds=120)
        if "WORLD_SIZE" in os.environ:  # torchrun
            world = int(os.environ["WORLD_SIZE"])
            require_gpus(world)
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group("nccl", timeout=timeout,
                                    device_id=torch.device("cuda", torch.cuda.current_device()))
        elif torch.cuda.is_available():
            dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1,
                                    timeout=timeout, device_id=torch.device("cuda", 0))
        else:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1, timeout=timeout)
    return dist.group.WORLD
