"""Redaction of secrets in DSNs and URLs before they are shown anywhere."""

from __future__ import annotations

import pytest

from twice.connectors.base import redact


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
