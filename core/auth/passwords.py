"""Password hashes for the console's users (``ztq.console.users`` lines, ``ztq hash-password``).

A hash is one token without spaces, so that a user line stays ``NAME ROLE HASH``:

    scrypt$<n>$<r>$<p>$<salt>$<key>          (default: hashlib.scrypt, n=2**15, r=8, p=1)
    pbkdf2_sha256$<iterations>$<salt>$<key>  (accepted too; used where OpenSSL lacks scrypt)

salt and key are unpadded URL-safe base64. Verification is constant-time and refuses
parameters far above the defaults, so a crafted hash cannot make a login burn the CPU.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SCRYPT_N = 2**15
SCRYPT_R = 8
SCRYPT_P = 1
PBKDF2_ITERATIONS = 600_000
KEY_BYTES = 32
SALT_BYTES = 16
_MAX_SCRYPT_N = 2**20
_MAX_PBKDF2_ITERATIONS = 10_000_000


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _scrypt(password: bytes, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    maxmem = 128 * r * n * p + 1024 * 1024 * 4
    return hashlib.scrypt(password, salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=maxmem)


def hash_password(password: str, *, n: int = SCRYPT_N, method: str = "scrypt") -> str:
    """A new salted hash of ``password`` (a line token for ``ztq.console.users``).

    ``n`` is the scrypt cost (a power of two); tests pass a small one to stay fast.
    ``method='pbkdf2_sha256'`` gives the PBKDF2 form.
    """
    if not isinstance(password, str) or not password:
        raise ValueError("the password must be a non-empty string")
    salt = secrets.token_bytes(SALT_BYTES)
    raw = password.encode("utf-8")
    if method == "scrypt" and hasattr(hashlib, "scrypt"):
        if n < 2 or n & (n - 1) or n > _MAX_SCRYPT_N:
            raise ValueError(f"scrypt cost n must be a power of two <= {_MAX_SCRYPT_N}")
        key = _scrypt(raw, salt, n, SCRYPT_R, SCRYPT_P, KEY_BYTES)
        return f"scrypt${n}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(key)}"
    if method not in ("scrypt", "pbkdf2_sha256"):
        raise ValueError(f"unknown password hash method {method!r}")
    key = hashlib.pbkdf2_hmac("sha256", raw, salt, PBKDF2_ITERATIONS, KEY_BYTES)
    return f"pbkdf2_sha256${PBKDF2_ITERATIONS}${_b64(salt)}${_b64(key)}"


def is_valid_hash(encoded: str) -> bool:
    """True when ``encoded`` has the form of a hash this module can verify."""
    return _parse(encoded) is not None


def _parse(encoded: str) -> tuple[str, tuple[int, ...], bytes, bytes] | None:
    if not isinstance(encoded, str):
        return None
    parts = encoded.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            if not (1 < n <= _MAX_SCRYPT_N and not n & (n - 1) and 0 < r <= 32 and 0 < p <= 16):
                return None
            params: tuple[int, ...] = (n, r, p)
            salt, key = _unb64(parts[4]), _unb64(parts[5])
        elif parts[0] == "pbkdf2_sha256" and len(parts) == 4:
            iterations = int(parts[1])
            if not 0 < iterations <= _MAX_PBKDF2_ITERATIONS:
                return None
            params = (iterations,)
            salt, key = _unb64(parts[2]), _unb64(parts[3])
        else:
            return None
    except (ValueError, TypeError):
        return None
    if not salt or not 16 <= len(key) <= 64:
        return None
    return parts[0], params, salt, key


def verify_password(password: str, encoded: str) -> bool:
    """True when ``password`` matches ``encoded``; False for a wrong or malformed hash."""
    parsed = _parse(encoded)
    if parsed is None or not isinstance(password, str):
        return False
    method, params, salt, key = parsed
    raw = password.encode("utf-8")
    if method == "scrypt":
        if not hasattr(hashlib, "scrypt"):
            return False
        n, r, p = params
        candidate = _scrypt(raw, salt, n, r, p, len(key))
    else:
        candidate = hashlib.pbkdf2_hmac("sha256", raw, salt, params[0], len(key))
    return hmac.compare_digest(candidate, key)


# A hash to verify against when the user name is unknown, so that a login with an unknown
# name costs as much as one with a known name (no user enumeration by timing).
def dummy_hash() -> str:
    global _DUMMY
    if _DUMMY is None:
        _DUMMY = hash_password(secrets.token_urlsafe(16))
    return _DUMMY


_DUMMY: str | None = None
