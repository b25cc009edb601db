"""Test tokens for the gateway: an RSA signing key, its JWKS, and RS256 JWTs signed with PyJWT.

    issuer = Issuer("https://issuer.test")
    config = rebind(..., jwks=[issuer.jwks])
    headers = {"authorization": f"Bearer {issuer.token(tenant='alpha')}"}
"""

from __future__ import annotations

import json
import time
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["Issuer", "DEFAULT_AUDIENCE"]

DEFAULT_AUDIENCE = "aifactory-gateway"
DEFAULT_LIFETIME_S = 600


class Issuer:
    """One token issuer: a fresh 2048-bit RSA key with key id `kid`."""

    def __init__(self, issuer: str, *, kid: str = "test-key") -> None:
        self.issuer, self.kid = issuer, kid
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    @property
    def jwks(self) -> str:
        """The public key as a JWKS document (what the issuer's jwks_uri would serve)."""
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self._key.public_key()))
        jwk.update(kid=self.kid, alg="RS256", use="sig")
        return json.dumps({"keys": [jwk]})

    def token(self, *, tenant: str | None = None, claim: str = "tenant", audience: str = DEFAULT_AUDIENCE,
              issuer: str | None = None, expires_in: float | None = DEFAULT_LIFETIME_S, **claims: Any) -> str:
        """An RS256 JWT; `tenant` goes in `claim` (omitted when None); `issuer` overrides `iss`; no `exp` when
        `expires_in` is None."""
        now = int(time.time())
        payload: dict[str, Any] = {"iss": issuer or self.issuer, "aud": audience, "sub": "test-client", "iat": now,
                                   **({} if expires_in is None else {"exp": now + int(expires_in)}), **claims}
        if tenant is not None:
            payload[claim] = tenant
        return jwt.encode(payload, self._key, algorithm="RS256", headers={"kid": self.kid})

    def bearer(self, tenant: str | None, **kwargs: Any) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token(tenant=tenant, **kwargs)}"}
