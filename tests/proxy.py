"""A TCP link to PostgreSQL that a test can cut (gevent-based, in the test's own process).

`FaultyLink(upstream)` listens on 127.0.0.1 and relays every connection to PostgreSQL's socket
(a Unix socket path or a (host, port) pair). `cut()` drops every open connection and refuses new
ones (the listening socket is closed: connection refused) until `mend()`; `cut_for(s)` mends by
itself after `s` seconds, the way a failover or a pooler restart comes back. `lose_next_reply()`
closes the connection that next carries a reply from the server, reply unsent: the statement
committed and its client cannot know (an ambiguous commit).
"""

import socket

import gevent
from gevent import socket as gsocket

from tests.helpers import free_port


class FaultyLink:
    def __init__(self, upstream):
        self.upstream = upstream
        self.port = free_port()
        #: Open (client, server) socket pairs.
        self.pairs: set[tuple] = set()
        self.lost_replies = 0
        self._lose_reply = False
        self._listener = None
        self._acceptor = None
        self.mend()

    def url(self, database: str, user: str = "postgres") -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def mend(self) -> None:
        """Accept connections again."""
        if self._listener is not None:
            return
        listener = gsocket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self._listener = listener
        self._acceptor = gevent.spawn(self._accept, listener)

    def cut(self) -> None:
        """Drop every connection and refuse new ones until `mend()`."""
        listener, self._listener = self._listener, None
        if listener is not None:
            self._acceptor.kill(block=False)
            listener.close()
        for pair in list(self.pairs):
            self._close(pair)

    def cut_for(self, seconds: float) -> gevent.Greenlet:
        """Cut now and mend after `seconds` (the fault's length, not a wait of the test's)."""
        self.cut()
        return gevent.spawn_later(seconds, self.mend)

    def lose_next_reply(self) -> None:
        """Drop the next reply the server sends, with its connection."""
        self._lose_reply = True

    def close(self) -> None:
        self.cut()

    def _accept(self, listener) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                family = socket.AF_UNIX if isinstance(self.upstream, str) else socket.AF_INET
                server = gsocket.socket(family, socket.SOCK_STREAM)
                server.connect(self.upstream)
            except OSError:
                client.close()
                continue
            pair = (client, server)
            self.pairs.add(pair)
            gevent.spawn(self._relay, pair, client, server, False)
            gevent.spawn(self._relay, pair, server, client, True)

    def _relay(self, pair, source, sink, replies: bool) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if replies and self._lose_reply:
                    self._lose_reply = False
                    self.lost_replies += 1
                    break
                sink.sendall(data)
        except OSError:
            pass
        self._close(pair)

    def _close(self, pair) -> None:
        self.pairs.discard(pair)
        for sock in pair:
            try:
                sock.close()
            except OSError:
                pass
