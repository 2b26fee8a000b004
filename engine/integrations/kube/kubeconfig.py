"""The user's kubeconfig: read, and its TLS material loaded, in memory. The one reader of a
kubeconfig's fields: what a run connects with (parse_kubeconfig), what a person is shown of it
(names), what a run's scrub list holds of it (credentials).

With engine/integrations/kube/network.py (where its server may be reached) this is the adapter's
trust boundary; the two can be audited on their own.

Secrets never touch the filesystem. `kubernetes.config`'s loader writes `*-data` fields to temp
files, so it is not used: the CA goes into an `ssl.SSLContext` from memory (`cadata`) and the
client certificate and key through an anonymous memfd closed as soon as the context has read it.
A SIGKILL at any moment therefore leaves nothing behind: a memfd has no name on any filesystem
and the kernel frees it with the process.

Only credentials a server can use without touching its own machine are accepted: a bearer token
and/or a client certificate given as data. File paths (`certificate-authority`, `client-key`,
`tokenFile`, ...), `exec` plugins and `auth-provider` are refused: a user's kubeconfig must not
make this server read its files or run commands.

`cluster.server` is https (http only when the operator allows it) and carries no userinfo, query
or fragment; where its host may be reached is network.py's to decide.
"""

import base64
import binascii
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from urllib3.util.ssl_ import create_urllib3_context

from engine.integrations.base import IntegrationError
from engine.trust.secrets import is_sensitive


class InvalidKubeconfig(IntegrationError):
    """The kubeconfig cannot be used by this server."""

    reason = "invalid_kubeconfig"


class UnresolvableServer(InvalidKubeconfig):
    """The server's host name does not resolve (at a run's start: the cluster is unreachable)."""


# -- parsing --------------------------------------------------------------------------------------

#: How a user gets a kubeconfig with the files' contents inline (the next step of a refusal).
_FLATTEN = "`kubectl config view --raw --minify --flatten` writes one"
#: What to use instead of a credential this server never runs or reads.
_TOKEN_OR_CERT = (
    "use a token (for example from `kubectl create token <service-account>`) or a client "
    "certificate (client-certificate-data and client-key-data) instead"
)
#: Fields that would make the server read its own files or run commands for a user, each with
#: the next step a user takes (what to put in the kubeconfig instead).
_REFUSED_CLUSTER_FIELDS = {
    "certificate-authority": f"use certificate-authority-data, the file's content ({_FLATTEN})",
    "proxy-url": "remove it: this server connects to the cluster's server address directly",
}
_REFUSED_USER_FIELDS = {
    "client-certificate": f"use client-certificate-data, the file's content ({_FLATTEN})",
    "client-key": f"use client-key-data, the file's content ({_FLATTEN})",
    "tokenFile": "use token, with the token itself in the kubeconfig",
    "exec": f"it runs a program to get credentials, which this server never does; {_TOKEN_OR_CERT}",
    "auth-provider": f"it needs a login plugin, which this server never runs; {_TOKEN_OR_CERT}",
    "username": f"user names and passwords are not accepted; {_TOKEN_OR_CERT}",
    "password": f"user names and passwords are not accepted; {_TOKEN_OR_CERT}",
}


@dataclass(frozen=True)
class KubeTarget:
    """What a kubeconfig's current context resolves to; secrets are kept out of repr()."""

    server: str
    #: The context's namespace: where a namespaced document without one goes (as with kubectl).
    namespace: str = "default"
    token: str | None = field(default=None, repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    client_cert_pem: bytes | None = field(default=None, repr=False)
    client_key_pem: bytes | None = field(default=None, repr=False)
    insecure_skip_tls_verify: bool = False
    tls_server_name: str | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.server).scheme

    @property
    def hostname(self) -> str:
        return urlsplit(self.server).hostname or ""

    @property
    def port(self) -> int:
        return urlsplit(self.server).port or (443 if self.scheme == "https" else 80)


def current_context(kubeconfig: dict, contexts: list):
    """The name of the context a kubeconfig uses: its current-context, else the name of its only
    context (as kubectl does); None (or whatever the document holds there) otherwise."""
    name = kubeconfig.get("current-context")
    if not name and len(contexts) == 1 and isinstance(contexts[0], dict):
        name = contexts[0].get("name")
    return name


def _entries(kubeconfig: dict, key: str) -> list:
    """The kubeconfig's list under `key` (absent: empty); InvalidKubeconfig for any other shape."""
    entries = kubeconfig.get(key)
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InvalidKubeconfig(f"{key} must be a list")
    return entries


def _named(entries: list, name, what: str) -> dict:
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(what)
            if not isinstance(body, dict):
                raise InvalidKubeconfig(f"{what} {name!r} has no {what} fields")
            return body
    raise InvalidKubeconfig(f"the kubeconfig has no {what} named {name!r}")


def _optional_text(entry: dict, key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidKubeconfig(f"{where}.{key} must be a string")
    return value or None


def _pem(data, name: str) -> bytes:
    try:
        decoded = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise InvalidKubeconfig(f"{name} is not valid base64")
    # PEM is ASCII; anything else would reach OpenSSL as a type error rather than a refusal.
    if b"-----BEGIN" not in decoded or not decoded.isascii():
        raise InvalidKubeconfig(f"{name} is not a PEM document")
    return decoded


def _refuse(entry: dict, refused: dict, where: str) -> None:
    for name, next_step in refused.items():
        if entry.get(name) not in (None, "", {}, []):
            raise InvalidKubeconfig(f"{where}.{name} is not supported by this server; {next_step}")


def _server_url(value) -> str:
    """cluster.server as an http(s) URL with a host and nothing that could reshape the request."""
    if not isinstance(value, str):
        raise InvalidKubeconfig("cluster.server must be an http(s) URL")
    server = value.strip().rstrip("/")
    try:  # an unclosed "[" (an IPv6 literal) is a ValueError from urllib, not a URL
        parts = urlsplit(server)
        hostname = parts.hostname
    except ValueError:
        raise InvalidKubeconfig("cluster.server must be an http(s) URL")
    if parts.scheme not in ("https", "http") or not hostname:
        raise InvalidKubeconfig("cluster.server must be an http(s) URL")
    # "?" or "#" with nothing after it still swallows the API path the adapter appends.
    if "?" in server or "#" in server:
        raise InvalidKubeconfig("cluster.server must not have a query or fragment")
    if "@" in parts.netloc:
        raise InvalidKubeconfig("cluster.server must not carry a user name or password")
    if any(c.isspace() or ord(c) < 0x20 or c == "\\" for c in server):
        raise InvalidKubeconfig("cluster.server must not contain spaces, controls or backslashes")
    try:
        _ = parts.port  # urllib parses the port lazily: reading it is the check
    except ValueError:
        raise InvalidKubeconfig("cluster.server has an invalid port")
    return server


def parse_kubeconfig(kubeconfig) -> KubeTarget:
    """The target of a kubeconfig's current context; InvalidKubeconfig naming the bad field."""
    if not isinstance(kubeconfig, dict):
        raise InvalidKubeconfig(
            "the kubeconfig must be a YAML document with clusters, contexts and users"
        )
    # Every level is checked for its shape before it is used: the document is the caller's.
    contexts = _entries(kubeconfig, "contexts")
    name = current_context(kubeconfig, contexts)
    if not name:
        raise InvalidKubeconfig(
            "the kubeconfig has no current-context: set one (`kubectl config use-context NAME`)"
        )
    context = _named(contexts, name, "context")
    cluster = _named(_entries(kubeconfig, "clusters"), context.get("cluster", ""), "cluster")
    user_name = context.get("user")
    user = _named(_entries(kubeconfig, "users"), user_name, "user") if user_name else {}
    _refuse(cluster, _REFUSED_CLUSTER_FIELDS, "cluster")
    _refuse(user, _REFUSED_USER_FIELDS, "user")

    server = _server_url(cluster.get("server"))
    ca = cluster.get("certificate-authority-data")
    cert, key = user.get("client-certificate-data"), user.get("client-key-data")
    if bool(cert) != bool(key):
        raise InvalidKubeconfig("client-certificate-data and client-key-data go together")
    token = _optional_text(user, "token", "user")
    server_name = _optional_text(cluster, "tls-server-name", "cluster")
    namespace = context.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise InvalidKubeconfig("context.namespace must be a string")
    return KubeTarget(
        server=server,
        namespace=namespace or "default",
        token=token,
        ca_pem=_pem(ca, "certificate-authority-data").decode("ascii") if ca else None,
        client_cert_pem=_pem(cert, "client-certificate-data") if cert else None,
        client_key_pem=_pem(key, "client-key-data") if key else None,
        insecure_skip_tls_verify=cluster.get("insecure-skip-tls-verify") is True,
        tls_server_name=server_name,
    )


def names(kubeconfig: dict) -> dict:
    """What a kubeconfig names, for a person: the context it uses, that context's cluster and
    namespace, and the server's host (never a credential). Never raises: nothing need have
    checked the document (the sandbox checks none), so a level of the wrong shape shows as no
    name."""
    contexts = _list(kubeconfig.get("contexts"))
    name = current_context(kubeconfig, contexts)
    context = _mapping(_entry(contexts, name).get("context"))
    cluster_name = context.get("cluster")
    cluster = _mapping(_entry(_list(kubeconfig.get("clusters")), cluster_name).get("cluster"))
    return {
        "context": _text(name),
        "cluster": _text(cluster_name),
        "server": _netloc(cluster.get("server")),
        "namespace": _text(context.get("namespace")),
    }


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _entry(entries: list, name) -> dict:
    return next((e for e in entries if isinstance(e, dict) and e.get("name") == name), {})


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _netloc(server) -> str:
    try:
        return urlsplit(server).netloc if isinstance(server, str) else ""
    except ValueError:  # an unclosed IPv6 bracket
        return ""


def _is_credential(name: str) -> bool:
    # Certificates are public ("certificate-authority" merely looks secret by name); keys are not.
    return name == "client-key-data" or (is_sensitive(name) and "certificate" not in name)


def credentials(kubeconfig) -> list[str]:
    """Every credential a kubeconfig carries, in the forms a cluster could quote back: tokens,
    passwords (and `user:password` for basic auth), client keys (as given, and decoded), and any
    secret-named string of a user entry (auth-provider and exec settings). For the run's scrub
    list; never raises, whatever shape the kubeconfig has."""
    found: list[str] = []

    def walk(value, name: str = "") -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, str(key))
        elif isinstance(value, list):
            for inner in value:
                walk(inner, name)
        elif isinstance(value, str) and value and _is_credential(name):
            found.append(value)
            if name.endswith("-data"):
                try:
                    pem = base64.b64decode(value, validate=True).decode("utf-8")
                except (binascii.Error, ValueError, UnicodeError):
                    return
                # The PEM, its body and each of its lines: a quote need not keep the armour.
                body = [line for line in pem.splitlines() if line and "-----" not in line]
                found.extend([pem, "".join(body), *body])

    users = kubeconfig.get("users") if isinstance(kubeconfig, dict) else None
    for entry in users if isinstance(users, list) else []:
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        walk(user)
        name, password = user.get("username"), user.get("password")
        if isinstance(name, str) and isinstance(password, str) and password:
            found.append(f"{name}:{password}")  # what an Authorization: Basic header encodes
    return list(dict.fromkeys(found))


# -- TLS without files ----------------------------------------------------------------------------


def _load_cert_chain_in_memory(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Load a client certificate and key into `context` without a named file.

    `SSLContext.load_cert_chain` only takes paths (bpo-16487). A memfd is an anonymous file: it has
    no name on any filesystem, is gone the moment it is closed (here, right after loading) and is
    freed by the kernel if the process dies first, SIGKILL included.
    """
    if not hasattr(os, "memfd_create"):
        _load_cert_chain_via_private_dir(context, cert_pem, key_pem)
        return
    fd = os.memfd_create("kube-client-cert", os.MFD_CLOEXEC)
    try:
        _write_all(fd, cert_pem + b"\n" + key_pem)
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    except ssl.SSLError as exc:
        raise InvalidKubeconfig(f"the client certificate or key cannot be loaded: {exc.reason}")
    finally:
        os.close(fd)


def _load_cert_chain_via_private_dir(
    context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes
) -> None:
    """Fallback where memfd is missing (not Linux): a 0700 dir removed before this returns.

    The file exists only while OpenSSL reads it (microseconds); a SIGKILL inside that window
    would leave it behind, readable only by this server's user.
    """
    directory = tempfile.mkdtemp(prefix="kube-")
    path = os.path.join(directory, "client.pem")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, cert_pem + b"\n" + key_pem)
        finally:
            os.close(fd)
        context.load_cert_chain(path)
    except ssl.SSLError as exc:
        raise InvalidKubeconfig(f"the client certificate or key cannot be loaded: {exc.reason}")
    finally:
        if os.path.exists(path):
            os.unlink(path)
        os.rmdir(directory)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def ssl_context(target: KubeTarget) -> ssl.SSLContext:
    """Trust (the kubeconfig's CA, or the system's) and identity for TLS, from memory only."""
    if target.insecure_skip_tls_verify:
        context = create_urllib3_context(cert_reqs=ssl.CERT_NONE)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = create_urllib3_context(cert_reqs=ssl.CERT_REQUIRED)
        if target.ca_pem:
            try:
                context.load_verify_locations(cadata=target.ca_pem)
            except ssl.SSLError as exc:
                raise InvalidKubeconfig(
                    f"certificate-authority-data cannot be loaded: {exc.reason}"
                )
        else:
            context.load_default_certs()
    if target.client_cert_pem and target.client_key_pem:
        _load_cert_chain_in_memory(context, target.client_cert_pem, target.client_key_pem)
    return context
