"""The bench every scenario runs on: virtual clock, Stripe server, checkpointer, workers, noise.

`Bench` owns the seeded randomness (ids, customers, timings) and starts the real components;
scenarios (`twice.lab.scenarios`) only say what happens in which order.
"""

from __future__ import annotations

import datetime as dt
import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import langgraph.checkpoint.base.id as langgraph_ids
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.types import RetryPolicy

from twice.lab.agent import Instrumentation, ToolOptions, Worker, open_checkpointer
from twice.lab.clock import VirtualClock
from twice.lab.effects import EffectLedger
from twice.lab.model import BASE62, ScriptedChatModel
from twice.lab.repeatable import repeatable as repeatable_run
from twice.lab.stripe_server import StripeServer

AMOUNTS = (900, 1500, 1900, 2900, 4900, 9900)
OUTPUT_FILES = (
    "events.json",
    "request_log.csv",
    "stripe_logs.jsonl",
    "checkpoints.sqlite",
    "spans.jsonl",
    "sqs.jsonl",
    "queue.jsonl",
    "truth.json",
    "README.md",
)


class Bench:
    def __init__(
        self,
        out_dir: Path,
        seed: int,
        clock: VirtualClock,
        server: StripeServer,
        checkpointer: BaseCheckpointSaver[Any],
        *,
        noise: int | None = None,
        dsn: str | None = None,
    ) -> None:
        self.out_dir = out_dir
        self.seed = seed
        self.rng = random.Random(seed)
        self.clock = clock
        self.server = server
        self.checkpointer = checkpointer
        self.noise_override = noise
        self.dsn = dsn  # PostgreSQL for the checkpointer (and the queue), when given
        self.model = ScriptedChatModel(seed=seed, id_style="anthropic")
        self.workers: list[Worker] = []
        self.customer = self.new_customer()
        self.noise_customers = [self.new_customer() for _ in range(12)]
        for customer in [self.customer, *self.noise_customers]:
            server.add_customer(customer, email=f"{customer[4:12].lower()}@example.com")
        self.noise_threads: list[str] = []
        # how long one model turn takes, seconds (field realism draws a slower or faster model)
        self.think_range = (0.9, 3.8)
        # model turns a caller scripted in advance (taken first, oldest first), so a run can be
        # placed to land its charge at a chosen time
        self.scripted_thinks: list[float] = []

    @property
    def spans_path(self) -> Path:
        return self.out_dir / "spans.jsonl"

    def new_customer(self) -> str:
        return "cus_" + "".join(self.rng.choice(BASE62) for _ in range(14))

    def new_thread(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def subscription(self) -> str:
        return "sub_" + "".join(self.rng.choice(BASE62) for _ in range(24))

    def think(self) -> float:
        """How long one model turn takes (the virtual clock moves by it)."""
        if self.scripted_thinks:
            return self.scripted_thinks.pop(0)
        return self.rng.uniform(*self.think_range)

    def travel_to(self, when: dt.datetime) -> None:
        """Move the virtual clock to `when`, backwards too: a run that happened earlier in the
        same window (another thread of a busy day) runs at its own time. LangGraph's uuid6 guard
        is reset so the run's checkpoint ids carry its own time (they match `ts`)."""
        travel_to(self.clock, when)

    def worker(
        self,
        name: str,
        tool: ToolOptions,
        *,
        retry_policy: RetryPolicy | None = None,
        base_url: str | None = None,
        after_commit: Callable[[dict[str, Any]], None] | None = None,
        instrumentation: Instrumentation = "lab",
        span_clock_offset: float = 0.0,
        error_spans: bool | None = None,
        span_thread_ids: bool = True,
    ) -> Worker:
        """A worker on this bench; `instrumentation`, `span_clock_offset`, `error_spans` and
        `span_thread_ids` as in `Worker`."""
        ledger = EffectLedger(self.checkpointer) if tool.effects_ledger else None
        worker = Worker(
            name,
            base_url=base_url or self.server.url,
            spans_path=self.spans_path,
            checkpointer=self.checkpointer,
            model=self.model,
            clock=self.clock,
            tool=tool,
            retry_policy=retry_policy,
            think_seconds=self.think,
            after_commit=after_commit,
            ledger=ledger,
            instrumentation=instrumentation,
            error_spans=error_spans,
            span_thread_ids=span_thread_ids,
            span_clock_offset=span_clock_offset,
        )
        self.workers.append(worker)
        return worker

    def noise_count(self, low: int, high: int) -> int:
        if self.noise_override is not None:
            return self.noise_override
        return self.rng.randint(low, high)

    def noise_request(self) -> tuple[str, str]:
        """A normal, unrelated charge request: (thread id, message)."""
        customer = self.rng.choice(self.noise_customers)
        amount = self.rng.choice(AMOUNTS)
        currency = self.rng.choice(("usd", "usd", "usd", "eur"))
        thread = self.new_thread()
        self.noise_threads.append(thread)
        text = (
            f"Please charge {customer} {amount} {currency} for subscription "
            f"{self.subscription()} (monthly renewal)."
        )
        return thread, text

    def noise(self, worker: Worker, low: int = 3, high: int = 8, gap: float = 25.0) -> None:
        """Other threads charged normally, a few seconds to `gap` apart."""
        for _ in range(self.noise_count(low, high)):
            self.clock.advance(self.rng.uniform(2.0, gap))
            worker.run(*self.noise_request())

    def shutdown(self) -> None:
        for worker in self.workers:
            worker.telemetry.shutdown()


def travel_to(clock: VirtualClock, when: dt.datetime) -> None:
    """Move a running VirtualClock to `when` (either direction) and reset LangGraph's uuid6
    monotonic guard. `VirtualClock.advance` only goes forward; time-machine's traveller shifts
    either way."""
    clock.move_to(when)
    langgraph_ids._last_v6_timestamp = None


@contextmanager
def bench(
    out_dir: Path,
    *,
    seed: int,
    start: dt.datetime,
    noise: int | None = None,
    dsn: str | None = None,
    clock_offset: float | None = None,
    server_options: dict[str, Any] | None = None,
    repeatable: bool = False,
) -> Iterator[Bench]:
    """The bench of one run; `repeatable=True`: the same seed writes the same evidence
    (`twice.lab.repeatable`)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in OUTPUT_FILES:
        (out_dir / name).unlink(missing_ok=True)
    random.seed(seed)  # stripe-python's and LangGraph's backoff jitter use the global generator
    # LangGraph's uuid6() never goes below the last id it made in this process; a new scenario
    # whose virtual clock starts EARLIER than the previous one's would get ids from the future.
    langgraph_ids._last_v6_timestamp = None
    if clock_offset is None:  # the provider's clock runs a little ahead of the agent's
        offset_rng = random.Random(seed * 7919 + 1)
        clock_offset = round(offset_rng.uniform(1.2, 3.4), 3)
    with ExitStack() as stack:
        clock = stack.enter_context(VirtualClock(start, tick=not repeatable))
        server = stack.enter_context(StripeServer(seed=seed, clock_offset=clock_offset,
                                                      **(server_options or {})))
        if repeatable:
            stack.enter_context(repeatable_run(clock, server, seed))
        checkpointer = stack.enter_context(
            open_checkpointer(None if dsn else out_dir / "checkpoints.sqlite", dsn)
        )
        lab = Bench(out_dir, seed, clock, server, checkpointer, noise=noise, dsn=dsn)
        try:
            yield lab
        finally:
            lab.shutdown()
