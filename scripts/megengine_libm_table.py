"""Writes megxla/random/_libm_rounding.npz: where glibc's float32 ``logf`` / ``cosf`` / ``sinf`` round otherwise
than the correctly rounded value, over every input MegEngine's CPU normal draws can give them.

MegEngine 1.13's normal draws (``fill_gaussian``, Box-Muller in float32) call the C library's ``logf(u1)``,
``cosf(theta)`` and ``sinf(theta)``, where ``u1`` and ``u2`` are its uniforms -- ``2 - f`` for the 2**23 floats ``f``
in [1, 2) -- and ``theta = (float)(2 * M_PI * u2)``: 2**23 possible arguments each. glibc's (2.28 and later, ARM's
optimized routines) are not correctly rounded: 0.7% / 1.3% / 1.3% of those results are the float on the other side
of the true value from the correctly rounded one. megxla computes the correctly rounded value with NumPy in float64
and moves these to the other neighbour, from one bitmap per function (index: the uniform's 23 mantissa bits); with
them its normal draws are MegEngine's bit for bit. The script checks that every difference is such a neighbour.

Usage (about a minute: 25 million calls through ctypes)::

    python scripts/megengine_libm_table.py [out.npz]
"""
import ctypes
import math
import sys

import numpy as np


def _uniforms():
    mantissa = np.arange(1 << 23, dtype=np.uint32)
    return np.float32(2) - (mantissa | np.uint32(0x3F800000)).view(np.float32)


def _glibc(name, x):
    fn = getattr(ctypes.CDLL("libm.so.6"), name)
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return np.fromiter(map(fn, x.tolist()), np.float32, len(x))


def main(out):
    u = _uniforms()
    theta = (2 * math.pi * u.astype(np.float64)).astype(np.float32)
    bitmaps = {}
    for name, x, exact in (("logf", u, np.log), ("cosf", theta, np.cos), ("sinf", theta, np.sin)):
        true = exact(x.astype(np.float64))
        nearest = true.astype(np.float32)
        libc = _glibc(name, x)
        other = ~(libc == nearest)
        # every difference is the neighbour on the true value's side of the nearest float
        toward = np.where(true > nearest.astype(np.float64), np.nextafter(nearest, np.float32(np.inf)),
                          np.nextafter(nearest, np.float32(-np.inf)))
        assert (libc[other] == toward[other]).all(), f"{name}: a difference of more than one float"
        bitmaps[name] = np.packbits(other)
        print(f"{name}: {int(other.sum())} of {len(x)} inputs round to the other neighbour")
    np.savez_compressed(out, **bitmaps)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "megxla/random/_libm_rounding.npz")
