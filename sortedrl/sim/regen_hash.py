"""The regenerated lengths' hashes, compiled: BLAKE2b of many ``(seed, sample, attempt)`` at once.

:meth:`AttemptLengths.lengths <sortedrl.sim.attempts.AttemptLengths.lengths>` draws a
regenerated attempt's length from the 16-byte BLAKE2b digest of its packed ``(seed, sample,
attempt)`` (``attempts._HASH``: digest size 16, the personalisation ``sortedrl-regen``, no key).
``sortedrl`` regenerates about half of its samples (553k draws at 1M samples), and ``hashlib``
took them one at a time from Python: a copy, an update and a digest each, 0.5 us a draw. Here
the one 24-byte block is compressed as RFC 7693 says, the twelve rounds written out (message
words 3-15 of a 24-byte block are zero) so that the state stays in registers: 0.1 us a draw
(553k: 0.30 -> 0.06 CPU s). ``tests/test_sim_regen.py`` holds it to ``hashlib``.
"""
from __future__ import annotations

import numpy as np
from numba import njit

IV = np.array([0x6A09E667F3BCC908, 0xBB67AE8584CAA73B, 0x3C6EF372FE94F82B, 0xA54FF53A5F1D36F1,
               0x510E527FADE682D1, 0x9B05688C2B3E6C1F, 0x1F83D9ABFB41BD6B, 0x5BE0CD19137E2179], dtype=np.uint64)
DIGEST_SIZE, PERSON = 16, b"sortedrl-regen"  # attempts._HASH's parameters


def _chaining_value() -> np.ndarray:
    """The state after the parameter block: digest size 16, no key, fanout and depth 1, no
    salt, the personalisation as two little-endian words."""
    h = IV.copy()
    h[0] ^= np.uint64(0x01010000 | DIGEST_SIZE)
    h[6:8] ^= np.frombuffer(PERSON.ljust(16, b"\0"), dtype="<u8")
    return h


H0 = _chaining_value()


@njit(cache=True, inline="always")
def _rotr(x, n):
    return (x >> np.uint64(n)) | (x << np.uint64(64 - n))


@njit(cache=True, inline="always")
def _g(a, b, c, d, x, y):
    """BLAKE2b's mixing function G."""
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@njit(cache=True)
def _digests(keys, h, iv, out):
    """``out[j]``: the first two words of the digest of ``keys[j]`` (uint64 seed, sample, attempt)."""
    z = np.uint64(0)
    for j in range(keys.shape[0]):
        m0, m1, m2 = keys[j, 0], keys[j, 1], keys[j, 2]
        v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
        v8, v9, v10, v11, v12, v13, v14, v15 = iv[0], iv[1], iv[2], iv[3], iv[4], iv[5], iv[6], iv[7]
        v12 ^= np.uint64(24)  # the bytes compressed: the one block's 24
        v14 = ~v14  # the last block
        # round 0: message words by SIGMA[0] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 1: message words by SIGMA[1] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 2: message words by SIGMA[2] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, m0)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, m2)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, m1)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 3: message words by SIGMA[3] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, m1)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m2, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, m0)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 4: message words by SIGMA[4] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, m0)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m2, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, m1)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 5: message words by SIGMA[5] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m2, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, m0, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m1, z)
        # round 6: message words by SIGMA[6] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m1, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m0, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, m2)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 7: message words by SIGMA[7] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, m1)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, m0)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, m2, z)
        # round 8: message words by SIGMA[8] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m0, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, m2)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, m1, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 9: message words by SIGMA[9] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, m2)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, m1, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, m0)
        # round 10: message words by SIGMA[0] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, m0, m1)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, m2, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, z, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, z, z)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        # round 11: message words by SIGMA[1] (only words 0-2 are not zero)
        v0, v4, v8, v12 = _g(v0, v4, v8, v12, z, z)
        v1, v5, v9, v13 = _g(v1, v5, v9, v13, z, z)
        v2, v6, v10, v14 = _g(v2, v6, v10, v14, z, z)
        v3, v7, v11, v15 = _g(v3, v7, v11, v15, z, z)
        v0, v5, v10, v15 = _g(v0, v5, v10, v15, m1, z)
        v1, v6, v11, v12 = _g(v1, v6, v11, v12, m0, m2)
        v2, v7, v8, v13 = _g(v2, v7, v8, v13, z, z)
        v3, v4, v9, v14 = _g(v3, v4, v9, v14, z, z)
        out[j, 0] = h[0] ^ v0 ^ v8
        out[j, 1] = h[1] ^ v1 ^ v9


def digests(seed: int, samples, attempts) -> np.ndarray:
    """The two 64-bit words (``attempts._UNPACK``) of the digest of each ``(seed, sample,
    attempt)``, an ``(n, 2)`` uint64 array; each value within int64 (``attempts._PACK``'s)."""
    keys = np.empty((len(samples), 3), dtype=np.int64)
    keys[:, 0], keys[:, 1], keys[:, 2] = seed, samples, attempts
    out = np.empty((len(samples), 2), dtype=np.uint64)
    _digests(keys.view(np.uint64), H0, IV, out)
    return out
