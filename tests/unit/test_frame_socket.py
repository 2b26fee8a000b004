"""The timeline websocket's frame writer and viewer over a real (gevent) socket pair."""

import select
from types import SimpleNamespace

import gevent.socket
import pytest

from blueprints.streams.timeline_hub import FrameSocket, Viewer


def test_a_try_writes_what_fits_and_never_waits():
    ours, peer = gevent.socket.socketpair()
    try:
        out = FrameSocket(SimpleNamespace(sock=ours, connected=True))
        small = out.send_now(b"frame")
        assert small == 5 and peer.recv(16) == b"frame"  # the control: a send that fits
        big = b"x" * (16 << 20)
        written = out.send_now(big)
        assert 0 < written < len(big)  # the buffer filled up: what fit, without waiting
        with pytest.raises(BlockingIOError):
            out.send_now(big)
    finally:
        ours.close()
        peer.close()


def test_a_try_on_a_closed_connection_never_reaches_the_next_one_on_its_descriptor():
    ours, peer = gevent.socket.socketpair()
    out = FrameSocket(SimpleNamespace(sock=ours, connected=True))
    number = ours.fileno()
    ours.close()
    peer.close()
    later = []  # new connections until one takes the number again (the lowest free is reused)
    while len(later) < 64 and number not in {s.fileno() for pair in later for s in pair}:
        later.append(gevent.socket.socketpair())
    try:
        assert number in {s.fileno() for pair in later for s in pair}  # the control
        with pytest.raises(OSError):
            out.send_now(b"frame")
        readable, _, _ = select.select([end for pair in later for end in pair], [], [], 0)
        assert readable == []
    finally:
        for pair in later:
            for end in pair:
                end.close()


def test_a_plain_socket_goes_through_the_queue():
    assert FrameSocket(SimpleNamespace(sock=object(), connected=True)).send_now is None


def test_what_does_not_fit_is_queued_and_so_is_everything_after_it():
    ours, peer = gevent.socket.socketpair()
    try:
        viewer = Viewer(FrameSocket(SimpleNamespace(sock=ours, connected=True)))
        viewer.busy = False  # its greenlet waits on an empty queue
        small = [(1, b"one")]
        viewer.offer(small, b"one", frozenset({1}))
        assert peer.recv(16) == b"one" and viewer.queue.empty()  # the control: sent at once
        big = b"x" * (16 << 20)
        viewer.offer([(2, big)], big, frozenset({2}))
        (rest,) = viewer.queue.get_nowait()
        assert rest[0] is None and 0 < len(rest[1]) < len(big)  # the part that did not fit
        viewer.queue.put_nowait([rest])
        viewer.offer([(3, b"three")], b"three", frozenset({3}))
        # Busy now: the next frame waits behind the rest of the big one, never cuts into it.
        assert viewer.busy and viewer.queue.qsize() == 2
        assert viewer.queue.get_nowait() == [rest]
        assert viewer.queue.get_nowait() == [(3, b"three")]
    finally:
        ours.close()
        peer.close()


def test_a_batch_the_bootstrap_already_sent_goes_through_the_queue():
    ours, peer = gevent.socket.socketpair()
    try:
        viewer = Viewer(FrameSocket(SimpleNamespace(sock=ours, connected=True)))
        viewer.busy, viewer.sent = False, {7}
        viewer.offer([(7, b"seven")], b"seven", frozenset({7}))
        assert viewer.queue.get_nowait() == [(7, b"seven")]  # its greenlet skips the seq
    finally:
        ours.close()
        peer.close()


def test_gevent_still_keeps_the_os_socket_where_the_frame_socket_reaches_for_it():
    """FrameSocket.send_now is a private attribute of gevent's socket (`_sock`, the OS socket it
    wraps, non-blocking): this fails when a gevent release moves or changes it."""
    import _socket

    ours, peer = gevent.socket.socketpair()
    try:
        inner = ours._sock
        assert isinstance(inner, _socket.socket)
        assert inner.fileno() == ours.fileno()
        assert inner.gettimeout() == 0.0  # non-blocking: a try never waits
        assert FrameSocket(SimpleNamespace(sock=ours, connected=True)).send_now == inner.send
    finally:
        ours.close()
        peer.close()
