"""Prometheus metrics of one server, on a registry of its own (two apps in one process do not share counts).

Names follow text-embeddings-inference (``router/src/prometheus.rs``, ``core/src/queue.rs``): ``te_request_count``,
``te_request_success`` (label ``method``: single / batch), ``te_request_failure`` (label ``err``), the histograms
``te_request_duration``, ``te_request_tokenization_duration``, ``te_request_queue_duration``,
``te_request_inference_duration`` (seconds, TEI's geometric buckets), ``te_request_input_length`` (tokens),
``te_batch_next_size`` (inputs a forward pass), ``te_batch_next_tokens``, and the gauge ``te_queue_size`` (inputs
waiting). prometheus-client writes counters with the ``_total`` suffix the OpenMetrics rules require
(``te_request_count_total``); TEI's exporter does not. spladekit adds ``spladekit_http_responses`` (route, status)
and ``spladekit_search_duration``.
"""

from __future__ import annotations

DURATION_BUCKETS = tuple(0.00001 * 1.5**n for n in range(1, 36))  # TEI: 35 buckets, ×1.5 from 15 µs
LENGTH_BUCKETS = tuple(float(2**n) for n in range(20))
BATCH_SIZE_BUCKETS = tuple(float(2**n) for n in range(13))
BATCH_TOKEN_BUCKETS = tuple(float(2**n) for n in range(21))


class Metrics:
    """The counters, histograms and gauges of one app; :meth:`render` is the text ``GET /metrics`` returns."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self.request_count = Counter("te_request_count", "Requests received", ["method"], registry=registry)
        self.request_success = Counter("te_request_success", "Requests answered", ["method"], registry=registry)
        self.request_failure = Counter("te_request_failure", "Requests refused or failed", ["err"], registry=registry)

        def histogram(name: str, text: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, text, buckets=buckets, registry=registry)

        self.request_duration = histogram("te_request_duration", "Request seconds", DURATION_BUCKETS)
        self.tokenization_duration = histogram(
            "te_request_tokenization_duration", "Tokenization seconds", DURATION_BUCKETS
        )
        self.queue_duration = histogram("te_request_queue_duration", "Seconds queued", DURATION_BUCKETS)
        self.inference_duration = histogram("te_request_inference_duration", "Forward seconds", DURATION_BUCKETS)
        self.input_length = histogram("te_request_input_length", "Tokens of an input", LENGTH_BUCKETS)
        self.batch_size = histogram("te_batch_next_size", "Inputs in a forward pass", BATCH_SIZE_BUCKETS)
        self.batch_tokens = histogram("te_batch_next_tokens", "Tokens in a forward pass", BATCH_TOKEN_BUCKETS)
        self.queue_size = Gauge("te_queue_size", "Inputs waiting for a forward pass", registry=registry)
        self.search_duration = histogram("spladekit_search_duration", "Index search seconds", DURATION_BUCKETS)
        self.responses = Counter(
            "spladekit_http_responses", "Responses by route and status", ["route", "status"], registry=registry
        )

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
