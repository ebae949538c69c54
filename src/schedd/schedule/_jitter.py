"""Herd control: deterministic per-job jitter and full-jitter retry backoff."""

from __future__ import annotations

import hashlib
import random


def jitter_offset_ms(job_id: str, fire_ms: int, jitter_ms: int) -> int:
    """A deterministic offset in ``[0, jitter_ms)`` for one fire of one job.

    The same (job, fire) always gets the same offset on every node and across restarts, so a
    pre-claimed execution and a rebuilt one agree. It uses BLAKE2b, not ``hash()``, which is
    salted per process.

    Returns:
        0 when ``jitter_ms <= 0``; otherwise an int ``0 <= offset < jitter_ms``.
    """
    if jitter_ms <= 0:
        return 0
    digest = hashlib.blake2b(f"{job_id}\x00{fire_ms}".encode(), digest_size=8).digest()
    # 64 bits against a jitter below ~2**40 ms: the modulo bias is negligible.
    return int.from_bytes(digest, "big") % jitter_ms


def retry_backoff_ms(
    attempt: int,
    *,
    initial_ms: int,
    max_ms: int,
    multiplier: float = 2.0,
    rng: random.Random | None = None,
) -> int:
    """Delay before retrying after failed attempt ``attempt`` (1-based), with full jitter.

    The delay is uniform in ``[0, min(max_ms, initial_ms * multiplier**(attempt-1))]``
    (AWS "full jitter"): retries of many jobs failing together spread out instead of
    returning in lockstep.

    Args:
        attempt: The attempt that just failed; values below 1 are treated as 1.
        initial_ms: Cap of the first delay.
        max_ms: Cap of every delay.
        multiplier: Growth of the cap per attempt.
        rng: Source of randomness (tests pass a seeded one); the module RNG if None.

    Returns:
        An int in the range above (0 if either cap is <= 0).
    """
    exp = max(attempt, 1) - 1
    if multiplier <= 1.0:
        cap_f = initial_ms * multiplier**exp
    else:
        # Grow step by step and stop at max_ms, so huge attempt numbers never overflow float.
        cap_f = float(initial_ms)
        for _ in range(exp):
            if cap_f >= max_ms:
                break
            cap_f *= multiplier
    cap = max(0, min(int(cap_f), max_ms))
    r = rng if rng is not None else random
    return r.randint(0, cap)
