"""A test token issuer: real keys (RSA, EC P-256, Ed25519), a discovery document and a JWKS served
over HTTP on 127.0.0.1 by gevent's WSGIServer, and tokens minted with PyJWT. Counts JWKS fetches
so tests can see when the server refreshed the key set."""

import json
import time
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from gevent.pywsgi import WSGIServer
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

AUDIENCE = "deploy-engine"


def new_key(alg: str):
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def public_jwk(key, kid: str) -> dict:
    public = key.public_key()
    exporter = {
        rsa.RSAPublicKey: RSAAlgorithm,
        ec.EllipticCurvePublicKey: ECAlgorithm,
        ed25519.Ed25519PublicKey: OKPAlgorithm,
    }
    for kind, algorithm in exporter.items():
        if isinstance(public, kind):
            return {**algorithm.to_jwk(public, as_dict=True), "kid": kid, "use": "sig"}
    raise TypeError(type(public))


class TokenIssuer:
    """One issuer: `url` is its exact issuer string; `keys` maps kid -> (alg, private key)."""

    def __init__(self):
        self.keys = {f"{alg.lower()}-1": (alg, new_key(alg)) for alg in ("RS256", "ES256", "EdDSA")}
        self.jwks_fetches = 0
        self.token_requests: list[dict] = []
        self.id_token_claims: dict = {}
        self.id_token_kid = "rs256-1"
        self.id_token_key = None
        self.server = WSGIServer(("127.0.0.1", 0), self.wsgi, log=None)
        self.server.start()
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def wsgi(self, environ, start_response):
        path = environ["PATH_INFO"]
        if path == "/.well-known/openid-configuration":
            body = {
                "issuer": self.url,
                "jwks_uri": self.url + "/jwks",
                "authorization_endpoint": self.url + "/authorize",
                "token_endpoint": self.url + "/token",
            }
        elif path == "/token":
            # The Authorization Code exchange: records the form (PKCE verifier, code) and answers
            # with the ID token a test prepared (`id_token_claims`, header `id_token_kid`, signed
            # with that key of ours or with `id_token_key`).
            size = int(environ.get("CONTENT_LENGTH") or 0)
            self.token_requests.append(parse_qs(environ["wsgi.input"].read(size).decode()))
            body = {
                "access_token": "opaque-access-token",
                "token_type": "Bearer",
                "expires_in": 300,
                "id_token": self.token(
                    claims=self.id_token_claims,
                    kid=self.id_token_kid,
                    key=self.id_token_key,
                    alg="RS256" if self.id_token_key else None,
                ),
            }
        elif path == "/jwks":
            self.jwks_fetches += 1
            body = {"keys": [public_jwk(key, kid) for kid, (_, key) in self.keys.items()]}
        else:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found"]
        start_response("200 OK", [("Content-Type", "application/json")])
        return [json.dumps(body).encode()]

    def claims(self, user="alice", workspaces=("team-a",), **extra) -> dict:
        now = int(time.time())
        return {
            "iss": self.url,
            "aud": AUDIENCE,
            "sub": user,
            "namespace": list(workspaces),
            "iat": now,
            "exp": now + 300,
            **extra,
        }

    def token(
        self,
        claims: dict | None = None,
        kid="rs256-1",
        headers: dict | None = None,
        key=None,
        alg=None,
        **claim_overrides,
    ) -> str:
        """A token signed with this issuer's key `kid` (or `key`/`alg` given explicitly)."""
        key_alg, own_key = self.keys.get(kid, (None, None))
        body = claims if claims is not None else self.claims(**claim_overrides)
        return jwt.encode(
            body, key or own_key, algorithm=alg or key_alg, headers={"kid": kid, **(headers or {})}
        )

    def bearer(self, **kwargs) -> dict:
        return {"Authorization": f"Bearer {self.token(**kwargs)}"}

    def stop(self):
        self.server.stop(timeout=2)
