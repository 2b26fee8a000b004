"""Contract: the cluster address guard refuses every address that is not publicly routable,
whatever form it is written in: IPv6 addresses that carry an IPv4 address (NAT64, 6to4,
IPv4-compatible, -mapped, -translated, Teredo) are judged by the IPv4 address they reach.

The world of this test sends every connection to one listener on loopback: an address the guard
let through would show up there. The registries below are written out as data here, on purpose
apart from the guard's own table, from the IANA IPv4 and IPv6 Special-Purpose Address Registries
(entries not globally reachable) plus multicast and the reserved ranges.
"""

import ipaddress

import pytest
from urllib3.util import connection as urllib3_connection

from engine.abort import AbortSignal
from engine.integrations.base import ApplyError, ClusterUnreachable
from engine.integrations.kube.backend import KubeBackend
from engine.integrations.kube.kubeconfig import InvalidKubeconfig, parse_kubeconfig
from engine.integrations.kube.network import NetworkPolicy
from engine.integrations.kube.retry import RetryPolicy
from tests.contract.conftest import kubeconfig_for
from tests.contract.helpers import DEPLOYMENT, CountingListener, header
from tests.helpers import IMAGE_SOURCE, wait_for

#: The requests of the issue, verbatim.
ISSUE_FORMS = [
    "64:ff9b::169.254.169.254",
    "64:ff9b::10.0.0.1",
    "64:ff9b:1::10.0.0.1",
    "2002:a9fe:a9fe::",
    "::10.0.0.1",
    "::ffff:0:169.254.169.254",
    "::127.0.0.1",
]

#: IANA IPv4 Special-Purpose Address Registry, the entries not globally reachable (and the
#: deprecated 6to4 relay anycast), plus multicast, reserved and limited broadcast.
IPV4_NOT_GLOBAL = [
    "0.0.0.0/8",
    "0.0.0.0/32",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.0.0/29",
    "192.0.0.8/32",
    "192.0.0.170/32",
    "192.0.0.171/32",
    "192.0.2.0/24",
    "192.88.99.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/4",
    "240.0.0.0/4",
    "255.255.255.255/32",
]
#: IANA IPv6 Special-Purpose Address Registry, the entries not globally reachable (and Teredo,
#: 6to4 and the IPv4 forms, which carry an address of the IPv4 list), plus multicast and the
#: deprecated site-local range.
IPV6_NOT_GLOBAL = [
    "::1/128",
    "::/128",
    "::ffff:0:0/96",
    "64:ff9b:1::/48",
    "100::/64",
    "100:0:0:1::/64",
    "2001::/23",
    "2001::/32",
    "2001:2::/48",
    "2001:10::/28",
    "2001:db8::/32",
    "3fff::/20",
    "5f00::/16",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
]


def ends(cidr: str) -> list[str]:
    net = ipaddress.ip_network(cidr)
    return list(dict.fromkeys([str(net[0]), str(net[min(1, net.num_addresses - 1)]), str(net[-1])]))


def ipv6_forms(v4: str) -> list[str]:
    """Every IPv6 way of writing an IPv4 address the guard must see through."""
    n = int(ipaddress.IPv4Address(v4))
    hi, lo = n >> 16, n & 0xFFFF
    teredo_client = n ^ 0xFFFFFFFF  # RFC 4380: the client address is stored inverted
    return [
        f"64:ff9b::{v4}",  # NAT64 well-known prefix (RFC 6052)
        f"64:ff9b:1::{v4}",  # NAT64 local-use prefix (RFC 8215)
        f"2002:{hi:x}:{lo:x}::1",  # 6to4 (RFC 3056)
        f"::{v4}",  # IPv4-compatible (RFC 4291)
        f"::ffff:{v4}",  # IPv4-mapped (RFC 4291)
        f"::ffff:0:{v4}",  # IPv4-translated (RFC 2765)
        f"2001:0:{hi:x}:{lo:x}:0:0:{teredo_client >> 16:x}:{teredo_client & 0xFFFF:x}",  # Teredo
    ]


HOSTILE = list(
    dict.fromkeys(
        ISSUE_FORMS
        + [a for cidr in IPV4_NOT_GLOBAL for a in ends(cidr)]
        + [a for cidr in IPV6_NOT_GLOBAL for a in ends(cidr)]
        + [f for cidr in IPV4_NOT_GLOBAL for a in ends(cidr) for f in ipv6_forms(a)]
    )
)
PUBLIC = ["8.8.8.8", "2001:4860:4860::8888", "64:ff9b::8.8.8.8", "2002:808:808::1"]


def url(address: str) -> str:
    return f"https://[{address}]" if ":" in address else f"https://{address}"


@pytest.fixture
def listener(monkeypatch):
    """Every connection of this process's kube adapter, to any address, lands here."""
    server = CountingListener()
    real = urllib3_connection.create_connection

    def everything_is_the_listener(address, *args, **kwargs):
        return real(("127.0.0.1", server.port), *args, **kwargs)

    monkeypatch.setattr(urllib3_connection, "create_connection", everything_is_the_listener)
    yield server
    server.stop()


def run_against(address: str) -> None:
    """What a run does with a kubeconfig that reached the backend: one apply, no retries. It fails
    either way: refused by the guard, or (a public address) the loopback listener resets it."""
    kube = KubeBackend(retry=RetryPolicy(max_retries=0)).cluster(kubeconfig_for(url(address)))
    with pytest.raises((ApplyError, ClusterUnreachable)):
        kube.apply(DEPLOYMENT, abort=AbortSignal())


def test_the_hostile_list_covers_every_form_and_registry_entry():
    assert len(HOSTILE) > 300
    assert all(form in HOSTILE for form in ISSUE_FORMS)


def test_every_special_purpose_address_in_every_form_is_refused_with_zero_connections(listener):
    policy = NetworkPolicy()
    let_through = [a for a in HOSTILE if policy.allows(a)]
    assert let_through == []
    for address in HOSTILE:
        with pytest.raises(InvalidKubeconfig, match="cluster.server"):
            policy.resolve(parse_kubeconfig(kubeconfig_for(url(address))))  # create's check
        run_against(address)
    assert listener.accepted == 0

    # Positive control: a public address, in each form, is connected to (the listener counts it).
    for address in PUBLIC:
        assert policy.allows(address), address
        run_against(address)
    wait_for(lambda: listener.accepted >= len(PUBLIC), message="the public addresses' connections")


def test_an_operator_network_opts_in_the_ipv4_address_whatever_its_ipv6_form():
    lab = NetworkPolicy.parse("10.0.0.0/8")
    assert lab.allows("64:ff9b::10.0.0.1") and lab.allows("::ffff:10.1.2.3")
    assert not lab.allows("64:ff9b::169.254.169.254")


@pytest.mark.parametrize("address", ISSUE_FORMS)
def test_the_issue_forms_are_refused_by_every_surface(make_app, listener, address):
    app = make_app(cluster_backend="kubernetes", overrides={"integrations": None})
    client = app.test_client()
    hostile = header(kubeconfig_for(url(address)))

    created = client.post(
        "/api/v1/tasks", headers=hostile, json={"projectId": "demo", "source": dict(IMAGE_SOURCE)}
    )
    checked = client.post(
        "/cluster-access/check",
        headers={**hostile, "X-CSRF-Token": csrf_token(client)},
    )

    assert created.status_code == 400, created.get_json()
    assert "cluster.server" in created.get_json()["message"]
    assert checked.status_code == 200 and checked.get_json()["ok"] is False, checked.get_json()
    assert client.get("/api/v1/tasks?projectId=demo").get_json()["items"] == []
    assert listener.accepted == 0


def csrf_token(client) -> str:
    import re

    page = client.get("/")
    return re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)
