"""Serving a small aiohttp app on ``HOST:PORT`` (the metrics endpoint, the dashboard)."""

from __future__ import annotations

import ssl

from aiohttp import web

from schedd._errors import Unavailable


async def serve(
    app: web.Application, listen: str, what: str, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Starts ``app`` on ``listen`` (port 0: any free one), over HTTPS with ``ssl_context``;
    returns its runner (``cleanup()`` stops it) and the port it got.

    Raises:
        Unavailable: the address cannot be listened on (``what`` names the server).
    """
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    host, _, port = listen.rpartition(":")
    site = web.TCPSite(runner, host or None, int(port), ssl_context=ssl_context)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise Unavailable(f"{what}: cannot listen on {listen}: {exc}") from exc
    sockets = getattr(site._server, "sockets", None) or []
    return runner, (sockets[0].getsockname()[1] if sockets else int(port))


def bound_address(listen: str, port: int) -> str:
    """``HOST:PORT`` of a server asked to listen on ``listen`` that got ``port``."""
    return f"{listen.rpartition(':')[0] or '0.0.0.0'}:{port}"
