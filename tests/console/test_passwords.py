"""ztq.core.auth.passwords: the hashes of ``ztq.console.users``."""

from __future__ import annotations

import pytest

from ztq.core.auth.passwords import hash_password, is_valid_hash, verify_password


def test_scrypt_round_trip() -> None:
    h = hash_password("s3cret ünïcode", n=1024)
    assert h.startswith("scrypt$1024$8$1$") and " " not in h
    assert verify_password("s3cret ünïcode", h)
    assert not verify_password("s3cret", h)
    assert hash_password("same", n=1024) != hash_password("same", n=1024)  # salted


@pytest.mark.slow
def test_default_cost_and_pbkdf2() -> None:
    h = hash_password("pw")
    assert h.startswith("scrypt$32768$") and verify_password("pw", h)
    p = hash_password("pw", method="pbkdf2_sha256")
    assert p.startswith("pbkdf2_sha256$600000$") and verify_password("pw", p)
    assert not verify_password("nope", p)


@pytest.mark.parametrize(
    "bad",
    ["", "plain", "scrypt$x$8$1$a$b", "scrypt$1024$8$1$$", "scrypt$3$8$1$YWJj$YWJj",
     "scrypt$1073741824$8$1$YWJjZGVmZ2hpamtsbW5vcA$YWJjZGVmZ2hpamtsbW5vcA",
     "pbkdf2_sha256$999999999$YWJj$YWJjZGVmZ2hpamtsbW5vcA", "md5$abc"],
)  # fmt: skip
def test_malformed_or_abusive_hashes_never_verify(bad: str) -> None:
    assert not is_valid_hash(bad)
    assert not verify_password("pw", bad)


def test_empty_password_is_refused() -> None:
    with pytest.raises(ValueError):
        hash_password("")
