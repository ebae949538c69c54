"""Waiting, in a process that serves, for SIGINT/SIGTERM or for the node to fail."""

from __future__ import annotations

import asyncio
import signal


def stop_on_signals() -> asyncio.Event:
    """An event set on SIGINT or SIGTERM (handlers on the running loop, from now on)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def until_stop_or_failure(stop: asyncio.Event, failed: asyncio.Event) -> bool:
    """Wait until ``stop`` or ``failed`` is set; returns whether ``failed`` is."""
    stopping = asyncio.ensure_future(stop.wait())
    failing = asyncio.ensure_future(failed.wait())
    await asyncio.wait([stopping, failing], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    failing.cancel()
    return failed.is_set()
