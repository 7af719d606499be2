# Diagnostic only: the expert-parallel prepare call in one process, no group.
import sys, torch
sys.path.insert(0, "python")
from xstage import _lib, moe_ep
torch.zeros(1, device="cuda")
dims = (300, 1024, 512, 16, 4, 2, -1)
print("layout", moe_ep.layout(dims, 10.0)["symmetric_bytes"], flush=True)
ptr, keep = _lib.i64_array(list(dims))
print("prepare ...", flush=True)
_lib.call("xstage_torch_moe_ep_prepare", ptr, 10.0)
print("prepare ok", flush=True)
