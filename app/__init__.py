"""The Tidemark HTTP service: ingest, stream settings, queries with bounds, alerts, dashboard."""
