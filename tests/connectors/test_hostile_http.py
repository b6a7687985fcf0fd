"""The live sources against backends that answer as hostile or broken servers do (a redirect to
an internal host, a drip, an endless or a huge answer; tests/connectors/hostile_http.py): each
request ends within its bounds with one clear error, never follows the redirect, and quotes
nothing of what the internal host would have said."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

import pytest

from tests.connectors.hostile_http import INTERNAL_ANSWER, MODES, hostile_backend
from tests.hostile import ENCODINGS, SPECIAL_SECRETS, encoded_forms
from twice.connectors.base import SourceError
from twice.connectors.live import stripe_api
from twice.connectors.live.http import HttpRefused, Limits, fetch
from twice.connectors.live.traces import backend_from_url

# small bounds, so the drips end soon; what is asserted is which bound ended them
LIMITS = Limits(connect_s=2.0, read_s=2.0, total_s=1.5, max_bytes=2**20)
SAID = {
    "redirect": "redirect to another host, which is not followed",
    "drip": "no complete answer within 1.5 s",
    "drip-headers": "no complete answer within 1.5 s",
    "endless": "larger than 1 MiB; cut off there",
    "huge": "larger than 1 MiB (20 GiB announced); not read",
}
KEY = "rk_test_51HostileHttpPlantedKey0042"
SINCE = datetime.now(UTC) - timedelta(hours=2)


def _assert_nothing_internal(message: str) -> None:
    assert "INTERNAL" not in message and "int3rnal" not in message
    assert KEY not in message and "\n" not in message


@pytest.mark.parametrize("mode", MODES)
def test_fetch_ends_within_its_bounds(mode: str) -> None:
    with hostile_backend(mode) as (url, internal):
        with pytest.raises(HttpRefused, match=re.escape(SAID[mode])) as refused:
            fetch("GET", url + "/api/traces", limits=LIMITS)
    assert internal.requests == []
    _assert_nothing_internal(str(refused.value))


@pytest.mark.parametrize("backend", ["jaeger", "tempo"])
@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_trace_backend_is_one_clear_error(backend: str, mode: str) -> None:
    with hostile_backend(mode) as (url, internal):
        api = backend_from_url(f"{backend}+{url}", limits=LIMITS)
        with pytest.raises(SourceError, match=re.escape(SAID[mode])) as err:
            api.get_trace("1" * 32)
    assert internal.requests == []
    assert err.value.source == f"{backend}+{url}"
    _assert_nothing_internal(str(err.value))


@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_langsmith_endpoint_is_one_clear_error(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGSMITH_API_KEY", KEY)
    with hostile_backend(mode) as (url, internal):
        api = backend_from_url(f"langsmith+{url}/agents", limits=LIMITS)
        with pytest.raises(SourceError, match=re.escape(SAID[mode])) as err:
            api.get_trace("1" * 32)
    assert internal.requests == []
    assert err.value.source == f"langsmith+{url}/agents"
    _assert_nothing_internal(str(err.value))


@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_langfuse_endpoint_is_one_clear_error(
        mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-lf-hostile0public")
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", KEY)
    with hostile_backend(mode) as (url, internal):
        api = backend_from_url(f"langfuse+{url}", limits=LIMITS)
        with pytest.raises(SourceError, match=re.escape(SAID[mode])) as err:
            api.get_trace("1" * 32)
    assert internal.requests == []
    assert err.value.source == f"langfuse+{url}"
    _assert_nothing_internal(str(err.value))
    assert "pk-lf-hostile0public" not in str(err.value)


@pytest.mark.parametrize("mode", MODES)
def test_a_hostile_stripe_base_url_is_one_clear_error(mode: str) -> None:
    with hostile_backend(mode) as (url, internal):
        with pytest.raises(SourceError, match=re.escape(SAID[mode])) as err:
            stripe_api.load(KEY, stripe_api.Subject("cus_1"), SINCE, SINCE + timedelta(hours=1),
                            base_url=url, limits=LIMITS)
    assert internal.requests == []
    assert str(err.value).startswith("stripe api: no answer from the Stripe API: ")
    _assert_nothing_internal(str(err.value))


def test_a_redirect_within_the_origin_is_followed() -> None:
    """A backend behind a path prefix that redirects to itself still answers."""
    with hostile_backend("redirect") as (_, internal):
        answer = fetch("GET", internal.url + "/a", limits=LIMITS)
    assert answer.status == 200 and answer.content == INTERNAL_ANSWER


def test_the_internal_answer_is_what_a_followed_redirect_would_have_quoted() -> None:
    """The redirect really points at the internal service: asked directly, it answers."""
    with hostile_backend("redirect") as (url, internal):
        with pytest.raises(HttpRefused):
            fetch("GET", url + "/x", limits=LIMITS)
        assert fetch("GET", internal.url + "/x", limits=LIMITS).content == INTERNAL_ANSWER
    assert internal.requests == ["/x"]


@pytest.mark.parametrize("backend", ["jaeger", "tempo", "langfuse"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("secret", SPECIAL_SECRETS)
def test_a_password_echoed_in_any_encoding_is_masked(backend: str, encoding: str,
                                                      secret: str) -> None:
    """The backend writes the password it was sent at the start of its 401 page, HTML-, form-,
    JSON- or base64-encoded: the quoted excerpt masks each form."""
    with hostile_backend("echo", encoding) as (url, _):
        host = url.removeprefix("http://")
        api = backend_from_url(f"{backend}+http://ops:{quote(secret, safe='')}@{host}",
                               limits=LIMITS)
        with pytest.raises(SourceError, match="HTTP 401") as err:
            api.get_trace("1" * 32)
    text = f"{err.value} {err.value!r}"
    assert "denied ***" in text, text  # the echo was there, and masked
    for form in encoded_forms(secret):
        assert form not in text, (encoding, form)
