"""Redaction of secrets in DSNs, URLs and echoed messages before they are shown anywhere."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.hostile import ENCODINGS, SPECIAL_SECRETS, encoded_forms
from twice.connectors.base import credentials, redact


@pytest.mark.parametrize(("text", "secret"), [
    ("postgresql://reader:s3cret@db.internal:5432/agent", "s3cret"),
    ("postgres://u:p@ss@host/db", "p@ss"),
    ("could not connect to postgresql://u:hunter2@10.0.0.1/db: timeout", "hunter2"),
    ("host=db user=reader password=s3cret dbname=agent", "s3cret"),
    ("postgresql://u@host/db?password=s3cret&sslmode=require", "s3cret"),
])
def test_passwords_are_removed(text: str, secret: str) -> None:
    shown = redact(text)
    assert secret not in shown
    assert "***" in shown


def test_text_without_secrets_is_unchanged() -> None:
    for text in ["postgresql://reader@db/agent", "/tmp/incident/events.json",
                 "https://api.stripe.com/v1/events"]:
        assert redact(text) == text


def test_host_and_user_stay_visible() -> None:
    assert redact("postgresql://reader:pw@db.internal:5432/agent") == \
        "postgresql://reader:***@db.internal:5432/agent"


# -- one redaction for every message (twice.connectors.redaction) ---------------------------
PW = "s3cret-Pa55"
URL = f"jaeger+http://ops:{PW}@traces.internal:16686"


def test_credentials_lists_what_a_url_or_dsn_carries() -> None:
    basic = base64.b64encode(f"ops:{PW}".encode()).decode()
    assert credentials(URL) == [PW, basic]
    token = "glc_tok3nAsTheUser"
    assert token in credentials(f"tempo+https://{token}@tempo.example/tempo")
    assert credentials("postgresql://reader:p%40ss@db/agent")[:2] == ["p@ss", "p%40ss"]
    assert "s3cret" in credentials("host=db user=reader password=s3cret")
    for none in (None, "", "postgresql://reader@db/agent", "https://api.stripe.com/v1/events",
                 "/tmp/agent.sqlite"):
        assert credentials(none) == []


@pytest.mark.parametrize("echoed", [
    f"401: user ops:{PW} is not allowed",  # the decoded basic auth
    f"GET http://ops:{PW}@traces.internal/api/services",  # the URL, userinfo and all
    "Authorization: Basic " + base64.b64encode(f"ops:{PW}".encode()).decode(),
    '{"authorization": "Basic ' + base64.b64encode(f"ops:{PW}".encode()).decode() + '"}',
    f"password is {PW}",  # the password on its own
    "password%3D" + quote(PW, safe=""),  # URL-encoded
])
def test_a_known_secret_is_masked_wherever_it_reappears(echoed: str) -> None:
    shown = redact(echoed, credentials(URL))
    assert PW not in shown and quote(PW, safe="") not in shown
    assert base64.b64encode(f"ops:{PW}".encode()).decode() not in shown
    assert "***" in shown
    assert redact(shown, credentials(URL)) == shown  # masking twice changes nothing


@pytest.mark.parametrize(("text", "shown"), [
    ("tempo+https://glc_tok3nAsTheUser@tempo.example/tempo", "tempo+https://***@tempo.example/tempo"),
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig", "Authorization: Bearer ***"),
    ("echoed: Basic b3BzOnMzY3JldA==", "echoed: Basic ***"),
    ("the key sk_test_51LeakKey9911 and rk_live_****9911", "the key [api key] and [api key]"),
    ('{"password": "hunter22"}', '{"password": "***"}'),
])
def test_tokens_and_headers_are_masked_without_knowing_them(text: str, shown: str) -> None:
    assert redact(text) == shown


@pytest.mark.parametrize("text", [
    "Basic authentication failed for user ops",
    'WWW-Authenticate: Basic realm="traces"',
    "password authentication failed for user \"reader\"",
    "HTTP 503 for GET /api/traces: upstream connect error",
    "https://api.stripe.com/v1/events?created[gte]=1717423260",
])
def test_words_about_credentials_stay_readable(text: str) -> None:
    assert redact(text) == text


# -- a secret in every form a server echoes it in --------------------------------------------
@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("secret", SPECIAL_SECRETS)
def test_a_secret_is_masked_in_every_encoding(secret: str, encoding: str) -> None:
    echoed = f"<p>bad password {ENCODINGS[encoding](secret)}</p> for ops"
    shown = redact(echoed, [secret])
    assert "bad password ***" in shown and shown.endswith(" for ops")
    for form in encoded_forms(secret):
        assert form not in shown


def test_a_secret_in_a_longer_base64_blob_is_masked_at_any_alignment() -> None:
    secret = "Pw&<\"' X9q-longer"
    for before in ("", "a", "ab", "abc", "user:"):
        blob = base64.b64encode(f"{before}{secret}!tail".encode()).decode()
        shown = redact(f"token {blob} end", [secret])
        assert "***" in shown
        for part in shown.removeprefix("token ").removesuffix(" end").split("***"):
            for pad in range(4):  # whatever is left decodes to no more than a few bytes of it
                try:
                    kept = base64.b64decode("A" * pad + part + "===", validate=False)
                except ValueError:
                    continue
                assert secret[:6].encode() not in kept and secret[-6:].encode() not in kept


SECRET_TEXT = st.text(st.sampled_from("aZ9 &<>\"'%+/\\?#@:;=\t€😀ü"), min_size=6, max_size=24)


@given(secret=SECRET_TEXT, encoding=st.sampled_from(sorted(ENCODINGS)),
       before=st.text("xyz -<>", max_size=6), after=st.text("xyz -<>", max_size=6))
def test_any_secret_in_any_encoding_and_any_mix_is_masked(
        secret: str, encoding: str, before: str, after: str) -> None:
    echoed = ENCODINGS[encoding](secret)
    if "***" in secret or "[api key]" in secret:
        return
    shown = redact(before + echoed + after, [secret])
    assert echoed not in shown and secret not in shown


@given(secret=SECRET_TEXT, data=st.data())
def test_a_secret_written_with_each_character_encoded_its_own_way_is_masked(
        secret: str, data: st.DataObject) -> None:
    """A server may escape some characters and not others (`&amp;` but a bare `'`)."""
    picks = [data.draw(st.sampled_from(["plain", "html", "html-39", "percent", "json"]))
             for _ in secret]
    mixed = "".join(ENCODINGS[pick](c) for pick, c in zip(picks, secret, strict=True))
    shown = redact(f"[{mixed}]", [secret])
    assert shown == "[***]"
