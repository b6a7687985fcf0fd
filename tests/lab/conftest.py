from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import stripe

from twice.lab.stripe_server import StripeServer
from twice.lab.stripe_wire import API_VERSION, LEGACY_API_VERSION

KEY = "sk_test_twice"
READ_ONLY_KEY = "rk_test_readonly"
# The account versions the lab shapes: pre-basil (references on charge/intent/invoice) and current.
API_VERSIONS = [LEGACY_API_VERSION, API_VERSION]

ClientFactory = Callable[..., stripe.StripeClient]


@pytest.fixture
def server() -> Iterator[StripeServer]:
    with StripeServer(api_keys={KEY: "full", READ_ONLY_KEY: "read_only"}, seed=7) as srv:
        yield srv


def make_client(url: str, key: str = KEY, retries: int = 0, **kwargs: Any) -> stripe.StripeClient:
    """The real SDK pointed at a lab server (or a gateway in front of it)."""
    return stripe.StripeClient(
        key, base_addresses={"api": url}, max_network_retries=retries, **kwargs
    )


@pytest.fixture(params=API_VERSIONS)
def versioned_server(request: pytest.FixtureRequest) -> Iterator[StripeServer]:
    """A lab account at each API version in turn (`server.api_version` says which)."""
    with StripeServer(api_keys={KEY: "full"}, seed=11, api_version=request.param) as srv:
        yield srv


@pytest.fixture
def client(server: StripeServer) -> ClientFactory:
    def factory(key: str = KEY, retries: int = 0, **kwargs: Any) -> stripe.StripeClient:
        return make_client(server.url, key, retries, **kwargs)

    return factory
