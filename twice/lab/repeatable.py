"""Lab runs that repeat exactly: the same seed writes the same evidence, to the microsecond.

A lab run on the ticking clock reads some real time (how long LangGraph took to checkpoint, how
long a request took on loopback), and stripe-python makes its idempotency keys from
`os.urandom`, so two runs of one seed differ in the milliseconds and in the keys. Drills need
the same id to show the same evidence, so `repeatable(clock, seed)` (entered by
`bench(..., repeatable=True)`) makes a run depend on its seed only:

- the virtual clock stands still (`VirtualClock(tick=False)`) and moves only where the program
  would wait: model turns, timeouts, backoffs (`time.sleep` advances it instead of waiting);
- every request to the lab provider takes a drawn 20-240 ms (network and the API's own work),
  so spans have durations and the provider's records follow the client's;
- stripe-python's automatic keys and `uuid.uuid4()` (moto's message ids) come from the seed.

The runs are sequential (one request at a time), so the draws come in the same order each run.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest.mock import patch

from twice.lab.clock import VirtualClock
from twice.lab.stripe_server import StripeServer

LATENCY_S = (0.02, 0.24)


@contextmanager
def repeatable(clock: VirtualClock, server: StripeServer, seed: int) -> Iterator[None]:
    """Inside: waits move `clock`, `server` answers after a drawn latency, random keys and ids
    come from `seed`."""
    import stripe._api_requestor as requestor

    keys = random.Random(f"keys:{seed}")
    ids = random.Random(f"uuid4:{seed}")
    latency = random.Random(f"latency:{seed}")

    def key() -> str:  # stripe-python's shape: 16 random bytes printed like a UUID
        b = keys.getrandbits(128).to_bytes(16, "big")
        return f"{b[0:4].hex()}-{b[4:6].hex()}-{b[6:8].hex()}-{b[8:10].hex()}-{b[10:].hex()}"

    def uuid4() -> uuid.UUID:
        return uuid.UUID(int=ids.getrandbits(128), version=4)

    def sleep(seconds: float) -> None:
        clock.advance(seconds)

    def before_answer() -> None:
        clock.advance(round(latency.uniform(*LATENCY_S), 6))

    with ExitStack() as stack:
        stack.enter_context(patch.object(requestor, "_generate_idempotency_key", key))
        stack.enter_context(patch.object(uuid, "uuid4", uuid4))
        stack.enter_context(patch.object(time, "sleep", sleep))
        server.before_answer = before_answer
        try:
            yield
        finally:
            server.before_answer = None
