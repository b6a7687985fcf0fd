from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests
import stripe

from tests.lab.conftest import KEY, make_client
from twice.lab.gateway import Gateway
from twice.lab.stripe_server import Fault, StripeServer

AUTH = {"Authorization": f"Bearer {KEY}"}
FORM = {"amount": "2000", "currency": "usd", "metadata[thread_id]": "t-1"}


@pytest.fixture
def gateway(server: StripeServer) -> Iterator[Gateway]:
    with Gateway(server.url, retries=2, per_try_timeout=2.0, seed=1) as gw:
        yield gw


def test_gateway_duplicates_a_keyless_post_after_reset_after_commit(
    server: StripeServer, gateway: Gateway
) -> None:
    server.add_fault(Fault(kind="reset_after_commit", path="/v1/charges"))
    response = requests.post(f"{gateway.url}/v1/charges", data=FORM, headers=AUTH, timeout=5)

    assert response.status_code == 200  # the client saw one success ...
    assert len(server.charges) == 2  # ... the provider made two charges
    assert [(r.envoy_attempt_count, r.idempotency_key) for r in server.requests] == [
        (1, None),
        (2, None),
    ]
    assert server.requests[0].body == server.requests[1].body
    assert [(a.path, a.attempt, a.outcome) for a in gateway.attempts] == [
        ("/v1/charges", 1, "reset"),
        ("/v1/charges", 2, "200"),
    ]
    assert gateway.attempts[0].time <= gateway.attempts[1].time
    assert response.headers["Request-Id"] == server.requests[1].request_id


def test_gateway_retry_of_an_sdk_post_is_replayed_by_the_key(
    server: StripeServer, gateway: Gateway
) -> None:
    server.add_fault(Fault(kind="reset_after_commit", path="/v1/charges"))
    charge = make_client(gateway.url).v1.charges.create(params={"amount": 500, "currency": "usd"})

    assert list(server.charges) == [charge.id]
    first, second = server.requests
    assert first.idempotency_key == second.idempotency_key is not None
    assert second.replayed and (first.envoy_attempt_count, second.envoy_attempt_count) == (1, 2)
    assert charge.last_response is not None
    assert charge.last_response.headers["Idempotent-Replayed"] == "true"


def test_headers_and_body_reach_upstream_unchanged(server: StripeServer, gateway: Gateway) -> None:
    headers = {**AUTH, "Idempotency-Key": "k-gw", "X-Trace": "abc"}
    requests.post(f"{gateway.url}/v1/charges", data=FORM, headers=headers, timeout=5)
    seen = server.requests[0]
    assert seen.idempotency_key == "k-gw"
    assert seen.headers["X-Trace"] == "abc"
    assert seen.body == "amount=2000&currency=usd&metadata%5Bthread_id%5D=t-1"
    assert seen.envoy_attempt_count == 1


def test_per_try_timeout_is_retried_and_the_provider_committed_both(
    server: StripeServer,
) -> None:
    server.add_fault(Fault(kind="delay_after_commit", path="/v1/charges", seconds=2.0))
    with Gateway(server.url, retries=1, per_try_timeout=0.3, seed=1) as gw:
        response = requests.post(f"{gw.url}/v1/charges", data=FORM, headers=AUTH, timeout=5)
    assert response.status_code == 200
    assert [a.outcome for a in gw.attempts] == ["timeout", "200"]
    assert len(server.charges) == 2


def test_exhausted_retries_pass_the_last_5xx_through(server: StripeServer) -> None:
    server.add_fault(Fault(kind="status_500", path="/v1/charges", times=5))
    with Gateway(server.url, retries=2, seed=1) as gw:
        sdk = make_client(gw.url)
        with pytest.raises(stripe.APIError) as err:
            sdk.v1.charges.create(params={"amount": 500, "currency": "usd"})
    assert err.value.http_status == 500
    assert [a.outcome for a in gw.attempts] == ["500", "500", "500"]
    assert not server.charges


def test_reset_not_in_retry_on_gives_envoys_503_and_no_retry(server: StripeServer) -> None:
    server.add_fault(Fault(kind="reset_before_commit", path="/v1/charges"))
    with Gateway(server.url, retry_on=("5xx",), seed=1) as gw:
        response = requests.post(f"{gw.url}/v1/charges", data=FORM, headers=AUTH, timeout=5)
    assert response.status_code == 503
    assert "upstream connect error or disconnect/reset before headers" in response.text
    assert [a.outcome for a in gw.attempts] == ["reset"]
    assert not server.charges


def test_backoff_is_envoys_fully_jittered_25ms_base() -> None:
    gw = Gateway("http://127.0.0.1:9", seed=5)
    first = [gw.backoff(1) for _ in range(200)]
    second = [gw.backoff(2) for _ in range(200)]
    assert 0 <= min(first) and max(first) <= 0.025
    assert max(second) <= 0.075 and max(second) > 0.025
