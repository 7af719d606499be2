"""libxstage_torch.so through ctypes: finding it, declaring its C signatures
(src/capi/torch_capi.cpp) and turning its error returns into Python errors.

The library takes plain pointers and a cudaStream_t, so it is built without
torch or Python headers; torch must be imported first so that the CUDA runtime
it links (libcudart.so.13) is the one torch already loaded.
"""
import ctypes
import os
import pathlib

import torch  # noqa: F401  (loads the CUDA runtime the library resolves against)

_ABI_VERSION = 5
_NAME = "libxstage_torch.so"
_ERR_LEN = 1024

_c_i64p = ctypes.POINTER(ctypes.c_int64)
_SIGNATURES = {
    "xstage_torch_abi_version": ([], ctypes.c_int),
    "xstage_attention_forward": (
        [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5
        + [_c_i64p, ctypes.c_float, ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int],
        ctypes.c_int),
    "xstage_ulysses_plan": ([_c_i64p, _c_i64p, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_ulysses_tile_order": (
        [_c_i64p, ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_int64, ctypes.c_char_p, ctypes.c_int],
        ctypes.c_int),
    "xstage_ulysses_fused": (
        [_c_i64p] + [ctypes.c_void_p] * 3 + [_c_i64p] + [ctypes.c_void_p] * 4
        + [ctypes.c_uint64, ctypes.c_float, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_double,
           ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_gemm": (
        [ctypes.c_int] + [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 4 + [ctypes.c_void_p, ctypes.c_int64,
                                                                          ctypes.c_void_p, ctypes.c_char_p,
                                                                          ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_workspace_bytes": (
        [ctypes.c_int] + [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [_c_i64p, _c_i64p, ctypes.c_char_p,
                                                                          ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_layer_sizes": ([_c_i64p, ctypes.c_int, _c_i64p, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_torch_moe_layer": (
        [_c_i64p, ctypes.c_int] + [ctypes.c_void_p] * 7 + [ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64]
        + [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_describe_route_error": (
        [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_torch_moe_ep_layout": ([_c_i64p, ctypes.c_double, _c_i64p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int],
                                   ctypes.c_int),
    "xstage_torch_moe_ep_prepare": ([_c_i64p, ctypes.c_double, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_torch_moe_ep_plan": (
        [_c_i64p, ctypes.c_double, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
         ctypes.POINTER(ctypes.c_double), ctypes.c_char_p, ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_ep_forward": (
        [_c_i64p, ctypes.c_double, ctypes.c_int] + [ctypes.c_void_p] * 2 + [ctypes.c_int64] + [ctypes.c_void_p] * 3
        + [ctypes.c_int64, ctypes.POINTER(ctypes.c_double), ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p,
           ctypes.c_int],
        ctypes.c_int),
    "xstage_torch_moe_ep_describe": (
        [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_ulysses_timeout_record_bytes": ([], ctypes.c_int),
    "xstage_ulysses_describe_timeout": ([ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
    "xstage_parse_store_path": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int],
                                ctypes.c_int),
    "xstage_parse_completion": ([ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int],
                                ctypes.c_int),
    "xstage_parse_attention_kernel": (
        [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p, ctypes.c_int], ctypes.c_int),
}

_lib = None


def library_candidates():
    """Where the library is looked for, in order: $XSTAGE_LIBRARY, then the
    package's own folder (pip install .)."""
    out = []
    env = os.environ.get("XSTAGE_LIBRARY")
    if env:
        out.append(pathlib.Path(env))
    out.append(pathlib.Path(__file__).resolve().parent / _NAME)
    return out


def lib():
    """The loaded library (loaded on first use, so that importing xstage,
    registering its ops and tracing them with fake tensors needs no library)."""
    global _lib
    if _lib is not None:
        return _lib
    candidates = library_candidates()
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        raise RuntimeError(
            f"xstage: {_NAME} not found (looked at {', '.join(str(p) for p in candidates)}); "
            "install the package with `pip install .` from the xstage repository, or point XSTAGE_LIBRARY "
            "at a built libxstage_torch.so")
    handle = ctypes.CDLL(str(path))
    # The version first: a library of another version may lack a symbol below.
    handle.xstage_torch_abi_version.argtypes, handle.xstage_torch_abi_version.restype = [], ctypes.c_int
    version = handle.xstage_torch_abi_version()
    if version == _ABI_VERSION:
        for name, (args, res) in _SIGNATURES.items():
            fn = getattr(handle, name)
            fn.argtypes, fn.restype = args, res
    if version != _ABI_VERSION:
        raise RuntimeError(f"xstage: {path} has C ABI version {version}, this package expects {_ABI_VERSION}: "
                           "rebuild it from the same checkout")
    _lib = handle
    return _lib


def call(name, *args):
    """Calls a library function whose last two arguments are the error buffer;
    raises RuntimeError with the library's message when it returns non-zero."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = getattr(lib(), name)(*args, err, _ERR_LEN)
    if rc != 0:
        raise RuntimeError(err.value.decode(errors="replace"))


def i64_array(values):
    arr = (ctypes.c_int64 * len(values))(*values)
    return ctypes.cast(arr, _c_i64p), arr  # the array must outlive the call


def parse(kind, name):
    """An enum value of the library from its CLI word: kind is 'store_path',
    'completion' or 'attention_kernel'; raises ValueError naming the words."""
    value = ctypes.c_int(0)
    err = ctypes.create_string_buffer(_ERR_LEN)
    rc = getattr(lib(), f"xstage_parse_{kind}")(name.encode(), ctypes.byref(value), err, _ERR_LEN)
    if rc != 0:
        raise ValueError(f"xstage: {err.value.decode(errors='replace')}")
    return value.value
