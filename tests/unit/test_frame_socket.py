"""The timeline websocket's frame writer over a real (gevent) socket pair."""

from types import SimpleNamespace

import gevent.socket

from blueprints.timeline_hub import FrameSocket


def test_a_try_writes_what_fits_and_never_waits():
    ours, peer = gevent.socket.socketpair()
    try:
        out = FrameSocket(SimpleNamespace(sock=ours, connected=True))
        assert out.can_try
        small = out.try_send(b"frame")
        assert small == 5 and peer.recv(16) == b"frame"  # the control: a send that fits
        big = b"x" * (16 << 20)
        written = out.try_send(big)
        assert 0 < written < len(big)  # the buffer filled up: what fit, without waiting
        assert out.try_send(big) == 0
    finally:
        ours.close()
        peer.close()


def test_a_plain_socket_goes_through_the_queue():
    assert not FrameSocket(SimpleNamespace(sock=object(), connected=True)).can_try
