"""Prometheus metrics of the API process (one registry per app, so tests can build many).

Tested by: tests/app/test_loop_watch.py and tests/app/test_prometheus_api.py (/metrics),
tests/app/test_readiness.py."""

from __future__ import annotations

from functools import partial

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["Metrics"]


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # Every family in this app's own registry, never prometheus_client's global one.
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, registry=self.registry)
        self.events_accepted = counter(
            "tidemark_events_accepted", "Events accepted by ingest", ["stream"])
        self.events_rejected = counter(
            "tidemark_events_rejected", "Events rejected by ingest", ["stream"])
        self.query_seconds = histogram("tidemark_query_seconds", "Query latency", ["query"])
        self.range_points = counter(
            "tidemark_range_points", "Points of answers over time (history, query_range): "
            "computed, or kept from a request before for the same summary version", ["source"])
        self.sketch_bytes = gauge(
            "tidemark_sketch_bytes", "Serialized size of a published sketch part", ["stream", "part"])
        self.sketch_version = gauge(
            "tidemark_sketch_version", "Latest published sketch version", ["stream"])
        self.publish_age_seconds = gauge(
            "tidemark_publish_age_seconds", "Seconds since the stream's last publish", ["stream"])
        self.batch_seconds = gauge(
            "tidemark_worker_batch_seconds", "Duration of the worker's last micro-batch")
        self.pending_events = gauge(
            "tidemark_pending_events", "Events of the stream accepted and not yet counted", ["stream"])
        self.log_pending_events = gauge(
            "tidemark_log_pending_events", "Events appended to a log partition and not yet "
            "read by a finished batch", ["partition"])
        self.log_pending_chunks = gauge(
            "tidemark_log_pending_chunks", "Ingest requests of a log partition not yet read "
            "by a finished batch", ["partition"])
        self.log_oldest_age = gauge(
            "tidemark_log_oldest_unread_seconds", "Age of the oldest entry of a log partition "
            "not yet read by a finished batch", ["partition"])
        self.wait_estimate = gauge(
            "tidemark_ingest_wait_estimate_seconds", "Estimated seconds until an event accepted "
            "now is counted (back-pressure refuses before TIDEMARK_READY_MAX_WAIT)")
        self.worker_capacity = gauge(
            "tidemark_worker_capacity_events_per_second", "Events per second of batch time the "
            "worker's recent batches showed")
        self.standby_workers = gauge(
            "tidemark_standby_workers", "Spare workers standing by to take over (`tidemark up`)")
        # The metric and its label keep the public name "part"; what they count is a service.
        self.service_restarts = gauge(
            "tidemark_part_restarts", "Restarts of a part by `tidemark up` since it started", ["part"])

        self.loop_stall = gauge(
            "tidemark_event_loop_stall_seconds", "Longest delay of this API process's event "
            "loop in the last 30 s (every request waits for the loop)")

        self.site_pulled_bytes = gauge(
            "tidemark_site_pulled_bytes", "Bytes received from a peer site by federated pulls "
            "since the API started (bodies as sent)", ["site"])
        self.site_pulls = gauge(
            "tidemark_site_pulls", "Federated pulls from a peer site since the API started, by "
            "what they got", ["site", "result"])

    def forget(self, stream: str) -> None:
        """Drop every series of a deleted stream (a new stream of the name starts at zero)."""
        for family in (self.events_accepted, self.events_rejected, self.sketch_version,
                       self.publish_age_seconds, self.pending_events):
            try:
                family.remove(stream)
            except KeyError:
                pass
        for labels in [k for k in list(self.sketch_bytes._metrics) if k[0] == stream]:
            self.sketch_bytes.remove(*labels)
