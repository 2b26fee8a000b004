"""Where a kubeconfig's server may be reached: its host resolved once, every address checked, and
connections made to exactly those addresses.

The server URL must not make this server a proxy into its own network (server-side request
forgery). Every address of `cluster.server`'s host must be publicly routable unless an operator
network (KUBE_ALLOWED_NETWORKS) opts it in; an IPv6 address that carries an IPv4 address is
judged by that address. The connections go to exactly the checked addresses, so a second DNS
answer (rebinding) is never asked for. TLS still verifies the certificate against the URL's own
hostname (or `tls-server-name`), and SNI carries it.
"""

import ipaddress
import socket
from dataclasses import dataclass

import urllib3
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError
from urllib3.util import connection as urllib3_connection

from engine.integrations.kube.kubeconfig import (
    InvalidKubeconfig,
    KubeTarget,
    UnresolvableServer,
    parse_kubeconfig,
    ssl_context,
)


def _networks(*cidrs: str) -> tuple:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


#: Where a publicly routable cluster can be at all: IPv4 unicast (no multicast, no 240/4) and
#: IPv6 global unicast (RFC 4291). Anything outside is refused whatever `is_global` says.
_GLOBAL_UNICAST = _networks("0.0.0.0/1", "128.0.0.0/2", "192.0.0.0/3", "2000::/3")
#: Inside those, the IANA special-purpose registries' entries that are not globally reachable
#: (IPv4 and IPv6 Special-Purpose Address Registries; Python's `is_global` misses some of them
#: and differs between versions).
_NOT_GLOBAL = _networks(
    "0.0.0.0/8",  # "this network"
    "10.0.0.0/8",  # private
    "100.64.0.0/10",  # carrier-grade NAT
    "127.0.0.0/8",  # loopback
    "169.254.0.0/16",  # link-local (cloud metadata)
    "172.16.0.0/12",  # private
    "192.0.0.0/24",  # IETF protocol assignments (DS-Lite, NAT64 discovery, dummy address)
    "192.0.2.0/24",  # documentation
    "192.88.99.0/24",  # 6to4 relay anycast: forwards into 6to4
    "192.168.0.0/16",  # private
    "198.18.0.0/15",  # benchmarking
    "198.51.100.0/24",  # documentation
    "203.0.113.0/24",  # documentation
    "2001::/23",  # IETF protocol assignments (Teredo, benchmarking, ORCHID)
    "2001:db8::/32",  # documentation
    "3fff::/20",  # documentation
)
#: IPv6 forms whose packets end at the IPv4 address in their last 32 bits: NAT64's well-known
#: prefix (RFC 6052), IPv4-compatible (RFC 4291, deprecated), IPv4-mapped (RFC 4291) and
#: IPv4-translated (RFC 2765). Decided by that IPv4 address.
_LOW_32_EMBEDS_IPV4 = _networks("64:ff9b::/96", "::/96", "::ffff:0:0/96", "::ffff:0:0:0/96")
#: Always refused: NAT64 local-use (RFC 8215; the operator's own translator, where the IPv4
#: address sits depends on the prefix length it chose) and Teredo (RFC 4380, a tunnel).
_TUNNELS_REFUSED = _networks("64:ff9b:1::/48", "2001::/32")


def _embedded_ipv4(ip) -> "ipaddress.IPv4Address | None":
    """The IPv4 address an IPv6 address carries to (6to4, NAT64, compatible, mapped,
    translated), or None."""
    if ip.version != 6:
        return None
    if ip.sixtofour is not None:
        return ip.sixtofour
    if any(ip in net for net in _LOW_32_EMBEDS_IPV4):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


# -- which addresses -----------------------------------------------------------------


@dataclass(frozen=True)
class NetworkPolicy:
    """Which cluster addresses this server connects to (KUBE_ALLOWED_NETWORKS, KUBE_ALLOW_HTTP)."""

    #: Networks opted back in although they are not publicly routable (an operator's own cluster).
    allowed_networks: tuple = ()
    allow_http: bool = False

    @classmethod
    def from_settings(cls, settings) -> "NetworkPolicy":
        return cls.parse(settings.kube_allowed_networks, allow_http=settings.kube_allow_http)

    @classmethod
    def parse(cls, networks: str, *, allow_http: bool = False) -> "NetworkPolicy":
        """From a comma-separated CIDR list; ValueError naming a bad entry (a boot error)."""
        parsed = []
        for entry in (networks or "").split(","):
            if entry.strip():
                try:
                    parsed.append(ipaddress.ip_network(entry.strip(), strict=False))
                except ValueError:
                    raise ValueError(f"KUBE_ALLOWED_NETWORKS: {entry.strip()!r} is not a CIDR")
        return cls(tuple(parsed), allow_http)

    def allows(self, address: str) -> bool:
        """Publicly routable, or inside an operator-allowed network. An IPv6 address carrying an
        IPv4 address is judged by that IPv4 address (the one its packets reach)."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if self._opted_in(ip):
            return True
        embedded = _embedded_ipv4(ip)
        if embedded is not None:
            return self.allows(str(embedded))
        return (
            any(ip in net for net in _GLOBAL_UNICAST if net.version == ip.version)
            and not any(
                ip in net for net in _NOT_GLOBAL + _TUNNELS_REFUSED if net.version == ip.version
            )
            and ip.is_global  # belt and braces: whatever this Python also knows to be internal
        )

    def _opted_in(self, ip) -> bool:
        return any(ip in net for net in self.allowed_networks if net.version == ip.version)

    def resolve(self, target: KubeTarget) -> tuple[str, ...]:
        """The addresses of the target's host, each one checked; InvalidKubeconfig otherwise.

        This is the only lookup: the connections go to these addresses.
        """
        if target.scheme == "http" and not self.allow_http:
            raise InvalidKubeconfig(
                "cluster.server must be https: use the cluster's https address, or ask this "
                "server's operator to allow plain http (the KUBE_ALLOW_HTTP setting; for test "
                "clusters only)"
            )
        try:
            infos = socket.getaddrinfo(target.hostname, target.port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError, OSError):
            raise UnresolvableServer("cluster.server: the host name does not resolve")
        addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
        if not addresses:
            raise UnresolvableServer("cluster.server: the host name does not resolve")
        # All of them, not just the first: a mixed answer is as good as a private one.
        if not all(self.allows(a) for a in addresses):
            raise InvalidKubeconfig(
                f"cluster.server {target.hostname} is a loopback, link-local, private or "
                "otherwise internal address, which this server does not connect to by default: "
                "use the cluster's public address, or ask this server's operator to allow that "
                "network (the KUBE_ALLOWED_NETWORKS setting, a list of CIDRs such as 10.0.0.0/8)"
            )
        return addresses


def check_kubeconfig(kubeconfig, network: NetworkPolicy = NetworkPolicy()) -> KubeTarget:
    """Parse a kubeconfig, check its server's addresses and load its TLS material, opening no
    connection; InvalidKubeconfig naming the field."""
    target = parse_kubeconfig(kubeconfig)
    if target.scheme == "https":
        ssl_context(target)
    network.resolve(target)
    return target


# -- connections to the checked addresses only ----------------------------------------------------


class _PinnedConnectionMixin:
    """Connects to the addresses checked at resolve time instead of looking the host up again.

    The connection keeps the URL's host as `host`, so the Host header, SNI and certificate
    verification all still use the name the user gave.
    """

    def __init__(self, *args, pinned_addresses: tuple[str, ...] = (), **kwargs):
        super().__init__(*args, **kwargs)
        self.pinned_addresses = pinned_addresses

    def _new_conn(self):
        if not self.pinned_addresses:
            raise NewConnectionError(self, "no checked address to connect to")
        error: OSError | None = None
        for address in self.pinned_addresses:
            try:
                return urllib3_connection.create_connection(
                    (address, self.port),
                    self.timeout,
                    source_address=self.source_address,
                    socket_options=self.socket_options,
                )
            except TimeoutError:
                error = ConnectTimeoutError(self, f"connecting to {self.host} timed out")
            except OSError as exc:
                error = exc
        if isinstance(error, ConnectTimeoutError):
            raise error
        raise NewConnectionError(self, f"Failed to establish a new connection: {error}")


class _PinnedHTTPConnection(_PinnedConnectionMixin, HTTPConnection):
    pass


class _PinnedHTTPSConnection(_PinnedConnectionMixin, HTTPSConnection):
    pass


def _host_key(host: str) -> str:
    """A host as one spelling: urllib3 brackets an IPv6 literal that urlsplit gives bare."""
    host = host.strip("[]").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


class PinnedPoolManager(urllib3.PoolManager):
    """A pool manager that reaches one checked server and nothing else."""

    def __init__(self, target: KubeTarget, addresses: tuple[str, ...], **kwargs):
        super().__init__(**kwargs)
        self._origin = (target.scheme, _host_key(target.hostname), target.port)
        self._addresses = addresses

    def _new_pool(self, scheme, host, port, request_context=None):
        if (scheme, _host_key(host), port) != self._origin:
            raise urllib3.exceptions.HTTPError("refusing a request to another server")
        pool = super()._new_pool(scheme, host, port, request_context)
        pool.ConnectionCls = _PinnedHTTPSConnection if scheme == "https" else _PinnedHTTPConnection
        pool.conn_kw = {**pool.conn_kw, "pinned_addresses": self._addresses}
        return pool


def pool_manager(target: KubeTarget, addresses: tuple[str, ...]) -> PinnedPoolManager:
    """A connection pool to the checked addresses with retries off (ours are explicit) and the
    in-memory TLS context."""
    kwargs: dict = {"num_pools": 2, "maxsize": 4, "retries": False}
    if target.scheme == "https":
        kwargs["ssl_context"] = ssl_context(target)
        if target.insecure_skip_tls_verify:
            kwargs.update(cert_reqs="CERT_NONE", assert_hostname=False)
        if target.tls_server_name:
            kwargs["server_hostname"] = target.tls_server_name
    return PinnedPoolManager(target, addresses, **kwargs)
