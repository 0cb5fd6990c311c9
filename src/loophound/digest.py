"""SHA-256 that can be saved and resumed, so a scan of an appended log hashes only new bytes.

hashlib cannot export its state. OpenSSL's SHA256_CTX is a plain, documented struct, so we
drive libcrypto (already loaded by Python's own ssl module) through ctypes and keep its
112 bytes in the catalog. Where libcrypto cannot be found, `available()` is False and ingest
re-hashes the whole file instead: slower, never wrong.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hashlib

import numpy as np

CTX_BYTES = 112  # sizeof(SHA256_CTX): h[8], Nl, Nh, data[16], num, md_len, all 32-bit


def _load():
    name = ctypes.util.find_library("crypto")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
        for fn in (lib.SHA256_Init, lib.SHA256_Update, lib.SHA256_Final):
            fn.restype = ctypes.c_int
        lib.SHA256_Update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        lib.SHA256_Final.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.SHA256_Init.argtypes = [ctypes.c_void_p]
    except (OSError, AttributeError):
        return None
    # prove it agrees with hashlib before trusting it with evidence
    ctx = ctypes.create_string_buffer(CTX_BYTES)
    out = ctypes.create_string_buffer(32)
    lib.SHA256_Init(ctx)
    lib.SHA256_Update(ctx, b"loophound", 9)
    lib.SHA256_Final(out, ctx)
    return lib if out.raw == hashlib.sha256(b"loophound").digest() else None


_LIB = _load()


def available() -> bool:
    return _LIB is not None


class Sha256:
    """hashlib-like SHA-256 with `state()` to save it and `Sha256(state)` to resume."""

    def __init__(self, state: bytes | None = None):
        self.seen = 0
        if _LIB is None:
            if state is not None:
                raise ValueError("cannot resume a SHA-256 state without libcrypto")
            self._h = hashlib.sha256()
            self._ctx = None
            return
        self._h = None
        self._ctx = ctypes.create_string_buffer(CTX_BYTES)
        if state is None:
            _LIB.SHA256_Init(self._ctx)
        else:
            if len(state) != CTX_BYTES:
                raise ValueError("not a SHA-256 state")
            ctypes.memmove(self._ctx, state, CTX_BYTES)

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Hash `data`, any bytes-like object, in place (a chunk's bytes are not copied)."""
        view = memoryview(data).cast("B")
        self.seen += view.nbytes
        if self._ctx is None:
            self._h.update(view)
        elif view.nbytes:
            # the address of the bytes, read-only ones too (ctypes takes only writable ones)
            _LIB.SHA256_Update(self._ctx, np.frombuffer(view, np.uint8).ctypes.data, view.nbytes)

    def hexdigest(self) -> str:
        if self._ctx is None:
            return self._h.hexdigest()
        ctx = ctypes.create_string_buffer(self._ctx.raw, CTX_BYTES)
        out = ctypes.create_string_buffer(32)
        _LIB.SHA256_Final(out, ctx)
        return out.raw.hex()

    def state(self) -> bytes | None:
        return None if self._ctx is None else self._ctx.raw
