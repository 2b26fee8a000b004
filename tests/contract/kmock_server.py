"""kmock (a Kubernetes API mock server by Kopf's author, on PyPI) served from a thread of its own.

kmock is asyncio/aiohttp; this suite runs under gevent's monkey-patching. The mock runs its own
event loop in a native thread (gevent's threadpool), so the adapter under test talks to it over
a real loopback socket exactly as it would to a kube-apiserver, and the test greenlet stays free.

The handler is kmock's `KubernetesScaffold`: real discovery documents (kmock's bundled K3s
resource list plus the TemplateInstance CRD declared here), Kubernetes `Status` errors, and the
responses each test scripts with kmock's DSL (`mock['patch /apis/...'] << 201 << {...}`). Its
stateful sibling, `KubernetesEmulator`, answers 404 to a PATCH of an object it does not hold, so
it cannot stand in for server-side apply (which creates on PATCH).

Scripts are added from the test greenlet before the requests they answer; kmock reads them from
its loop thread (plain list appends and reads, safe under the GIL).
"""

import asyncio
import time

import gevent
import kmock
from aiohttp.test_utils import RawTestServer
from gevent.threadpool import ThreadPool

TEMPLATE_INSTANCES = "templates.deploy.example/v1/templateinstances"
START_TIMEOUT_S = 10.0


class KMockServer:
    """A running kmock Kubernetes API mock: `url`, the DSL root `mock`, and test helpers."""

    def __init__(self, ssl_context=None):
        self.ssl_context = ssl_context
        self.mock: kmock.KubernetesScaffold | None = None
        self.url: str | None = None
        self.port: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._release: asyncio.Event | None = None
        self._pool = ThreadPool(1)
        self._done = None

    def start(self) -> "KMockServer":
        self._done = self._pool.spawn(asyncio.run, self._serve())
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.url is None:
            if self._done.ready():
                self._done.get()  # re-raises the server's startup error
            if time.monotonic() > deadline:
                raise RuntimeError("kmock did not start")
            gevent.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._done.get(timeout=10)
        self._pool.kill()

    async def _serve(self) -> None:
        handler = kmock.KubernetesScaffold()
        handler.resources.load_bundled()
        handler.resources[TEMPLATE_INSTANCES] = kmock.ResourceInfo(
            kind="TemplateInstance",
            namespaced=True,
            verbs={"get", "list", "watch", "create", "update", "patch", "delete"},
        )
        ssl_context = self.ssl_context

        class Transport(RawTestServer):
            async def start_server(self, loop=None, **kwargs):
                await super().start_server(loop=loop, ssl=ssl_context, **kwargs)

        self._stop, self._release = asyncio.Event(), asyncio.Event()
        async with handler, kmock.Server(handler, server_cls=Transport) as server:
            self.mock, self.port = handler, server.port
            self._loop = asyncio.get_running_loop()
            self.url = str(server.url).rstrip("/")
            await self._stop.wait()
            self._release.set()  # let hung responses finish so the server can shut down

    # -- helpers for scripting ------------------------------------------------------------------
    def hang(self):
        """A kmock payload that never answers (until the server stops)."""
        release = self._release
        return lambda: release.wait()

    def requests(self, criteria=None) -> list:
        """Requests the mock received (all, or those matching a kmock criterion), oldest first."""
        view = self.mock if criteria is None else self.mock[criteria]
        return list(view)
