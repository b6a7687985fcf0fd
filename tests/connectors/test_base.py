"""Redaction of secrets in DSNs, URLs and echoed messages before they are shown anywhere."""

from __future__ import annotations

import base64
from urllib.parse import quote

import pytest

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
