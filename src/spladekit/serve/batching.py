"""Dynamic batching, as text-embeddings-inference does it: concurrent requests gathered into one forward pass.

Admission: every input of a request takes one of ``max_concurrent_requests`` slots for as long as it is being
tokenized, queued or encoded (TEI's permits); when the slots are taken the request is refused at once with 429
"Model is overloaded" (and a ``Retry-After`` header), so the queue is bounded and memory stays flat however many
clients come.

Gathering: one asyncio task takes the queued jobs in arrival order and runs one forward pass at a time in one worker
thread; while it runs, new requests queue, and the next pass takes them together (continuous batching). A pass holds
jobs of one kind (side and truncation direction) up to ``max_batch_tokens`` tokens (after truncation; a job larger
than the budget runs alone) and ``max_batch_requests`` inputs. A job whose client went away (its future cancelled)
is dropped before its forward pass.

Waiting, where spladekit differs from TEI (which starts a pass with whatever is queued): a pass being formed waits up
to ``batch_wait_ms`` while admitted requests are still being read or tokenized, and, for no longer than the previous
pass took, while fewer requests are queued than the previous pass answered. Clients answered together come
back together; on a CPU, where a pass of 32 costs far less than four passes of 8, starting with the first one back
splits them into small passes for good. One client never waits (its pass answered one request, and one is queued).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import scipy.sparse as sp

from spladekit.serve.metrics import Metrics
from spladekit.serve.settings import ServeSettings
from spladekit.serve.tei import OVERLOADED, TeiError

log = logging.getLogger("spladekit")

Encode = Callable[[list[str], str, str], sp.csr_matrix]  # (texts, side, truncation direction) → CSR rows


@dataclass
class Job:
    """The inputs of one request (or one part of a search), encoded together in one pass."""

    texts: list[str]
    tokens: int  # after truncation: what the pass's token budget counts
    side: str
    direction: str
    future: asyncio.Future
    queued_at: float = field(default_factory=time.perf_counter)
    queue_s: float = 0.0
    inference_s: float = 0.0

    @property
    def key(self) -> tuple[str, str]:
        return self.side, self.direction


class Admission:
    """Slots held by one request (:meth:`Batcher.admission`)."""

    def __init__(self, batcher: Batcher, inputs: int):
        self.batcher, self.inputs, self.arriving = batcher, inputs, True

    def arrived(self) -> None:
        """The request's inputs are read and tokenized (or refused): a pass no longer waits for it."""
        if self.arriving:
            self.arriving = False
            self.batcher.arriving -= 1
            self.batcher._wake()


class Batcher:
    """The queue, its gathering task and the encoding thread of one server."""

    def __init__(self, encode: Encode, settings: ServeSettings, metrics: Metrics | None = None):
        self.encode, self.settings, self.metrics = encode, settings, metrics
        self.admitted = 0  # inputs holding a slot
        self.arriving = 0  # requests admitted, still being read or tokenized
        self.queue: deque[Job] = deque()
        self.forward_passes = 0
        self.last_pass_jobs = 0  # requests the previous pass answered: how many are likely to come back
        self.last_pass_s = 0.0
        self.dropped = 0  # inputs whose client left before their pass
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ life
    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spladekit-encode")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="spladekit-batcher")

    async def stop(self) -> None:
        """Stop gathering (after uvicorn drained the requests); jobs still queued fail as Unhealthy."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        while self.queue:
            job = self.queue.popleft()
            if not job.future.done():
                job.future.set_exception(TeiError("the server is shutting down", "Unhealthy"))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    # ------------------------------------------------------------------ admission
    @contextlib.contextmanager
    def admission(self, inputs: int) -> Iterator[Admission]:
        """Hold ``inputs`` slots for the block, or refuse now with 429 when they are not free. Until the block calls
        :meth:`Admission.arrived` (its inputs read and tokenized), a pass being formed may wait for it."""
        if self.admitted + inputs > self.settings.max_concurrent_requests:
            raise TeiError(OVERLOADED, "Overloaded", headers={"Retry-After": str(self.settings.retry_after_s)})
        admission = Admission(self, inputs)
        self.admitted += inputs
        self.arriving += 1
        try:
            yield admission
        finally:
            admission.arrived()
            self.admitted -= inputs

    def _wake(self) -> None:
        if self._wakeup is not None:
            self._wakeup.set()

    # ------------------------------------------------------------------ submission
    async def submit(self, texts: list[str], tokens: int, side: str, direction: str = "right") -> Job:
        """Queue ``texts`` and wait for their vectors (``job.future``'s result, rows in order). Cancelling the
        awaiting task (a client gone) cancels the job: it is dropped if its pass has not started."""
        if not self.running:
            raise TeiError("the encoding queue is not running", "Unhealthy")
        job = Job(texts, tokens, side, direction, asyncio.get_running_loop().create_future())
        self.queue.append(job)
        self._queue_gauge()
        self._wake()
        try:
            await job.future
        except asyncio.CancelledError:
            job.future.cancel()
            raise
        return job

    # ------------------------------------------------------------------ the gathering task
    def _queue_gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_size.set(sum(len(job.texts) for job in self.queue))

    async def _run(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self.queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            await self._gather_arrivals()
            batch = self._next_batch()
            self._queue_gauge()
            if not batch:
                continue
            texts = [text for job in batch for text in job.texts]
            started = time.perf_counter()
            for job in batch:
                job.queue_s = started - job.queued_at
            if self.metrics is not None:
                self.metrics.batch_size.observe(len(texts))
                self.metrics.batch_tokens.observe(sum(job.tokens for job in batch))
            self.forward_passes += 1
            try:
                vectors = await loop.run_in_executor(
                    self._executor, self.encode, texts, batch[0].side, batch[0].direction
                )
            except Exception as error:  # a backend failure answers its requests with 424, the server goes on
                log.exception("encoding failed")
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(TeiError(f"Backend error: {error}", "Backend"))
                continue
            seconds = time.perf_counter() - started
            self.last_pass_jobs, self.last_pass_s = len(batch), seconds
            row = 0
            for job in batch:
                job.inference_s = seconds
                if not job.future.done():
                    job.future.set_result(vectors[row : row + len(job.texts)])
                row += len(job.texts)

    async def _gather_arrivals(self) -> None:
        """Wait, up to ``batch_wait_ms``, while the pass has room and requests are on the way: being read or
        tokenized, or (for no longer than the previous pass took) fewer queued than the previous pass answered."""
        assert self._wakeup is not None
        now = time.perf_counter()
        deadline = now + self.settings.batch_wait_ms / 1000
        come_back_until = min(deadline, now + self.last_pass_s)
        while (until := self._waiting_until(deadline, come_back_until)) is not None:
            remaining = until - time.perf_counter()
            if remaining <= 0:
                return
            self._wakeup.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), remaining)

    def _waiting_until(self, deadline: float, come_back_until: float) -> float | None:
        """Until when the pass being formed waits for more (None: it starts now)."""
        if not self.queue:
            return None
        key = self.queue[0].key
        same = [job for job in self.queue if job.key == key and not job.future.done()]
        if sum(job.tokens for job in same) >= self.settings.max_batch_tokens:
            return None
        limit = self.settings.max_batch_requests
        if limit is not None and sum(len(job.texts) for job in same) >= limit:
            return None
        if self.arriving > 0:
            return deadline
        return come_back_until if len(same) < self.last_pass_jobs else None

    def _next_batch(self) -> list[Job]:
        """The jobs of the next pass: the oldest live job's kind, in arrival order, within the budgets; cancelled
        jobs are dropped on the way."""
        batch: list[Job] = []
        kept: deque[Job] = deque()
        tokens = inputs = 0
        limit = self.settings.max_batch_requests
        full = False
        while self.queue:
            job = self.queue.popleft()
            if job.future.done():  # cancelled: its client left
                self.dropped += len(job.texts)
                if self.metrics is not None:
                    self.metrics.request_failure.labels(err="dropped").inc()
                continue
            fits = not batch or (
                job.key == batch[0].key
                and tokens + job.tokens <= self.settings.max_batch_tokens
                and (limit is None or inputs + len(job.texts) <= limit)
            )
            if full or not fits:
                kept.append(job)
                full = full or (bool(batch) and job.key == batch[0].key)  # keep arrival order within a kind
                continue
            batch.append(job)
            tokens += job.tokens
            inputs += len(job.texts)
        self.queue = kept
        return batch
