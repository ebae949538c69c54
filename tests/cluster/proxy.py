"""A loopback TCP proxy the test controls: the way to cut one node off from etcd.

Each node reaches each etcd member through its own :class:`Proxy`. :meth:`cut` makes the
link a black hole, as a network partition does: established connections stop carrying bytes
(nothing is closed, so the client sees silence, not a reset) and new connections are accepted
but never joined to the member. :meth:`restore` closes everything that was held, so the
client reconnects to a working link.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from schedd.dev import free_port


class Proxy:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self._target = (host, int(port))
        self.port = free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._lock = threading.Lock()
        self._cut = False
        self._socks: set[socket.socket] = set()
        self._closed = False
        threading.Thread(target=self._accept, name=f"proxy-{self.port}", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cut(self) -> None:
        with self._lock:
            self._cut = True

    def restore(self) -> None:
        with self._lock:
            self._cut = False
            held, self._socks = self._socks, set()
        for s in held:
            _close(s)

    def close(self) -> None:
        self._closed = True
        _close(self._server)
        self.restore()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._socks.add(client)
                cut = self._cut
            if cut:
                continue  # held open, never joined: a black hole
            try:
                upstream = socket.create_connection(self._target, timeout=2.0)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._socks.add(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                while self._cut:  # silence: the bytes wait here until the link is restored
                    if src not in self._socks:
                        return
                    threading.Event().wait(0.05)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
