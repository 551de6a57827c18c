"""Realistic live streams for ``tidemark demo``: skewed keys, heavy-tailed delays, bursts."""

from __future__ import annotations

import threading
import time

import httpx
import numpy as np

from tidemark.streams import StreamConfig

__all__ = ["DEMO_STREAMS", "DemoFeeder", "generate"]

DEMO_STREAMS = {
    "web-requests": StreamConfig(max_window="1h", epsilon=0.05, delta=0.05, value_min=0,
                                 value_max=5000, decays=[{"kind": "polynomial", "alpha": 1.5}]),
    "payments": StreamConfig(max_window="30m", epsilon=0.05, delta=0.05, value_min=0,
                             value_max=10000),
}


def generate(rng: np.random.Generator, now: float, n: int, n_keys: int = 2000) -> list[dict]:
    """``n`` events around ``now``: Zipf keys, log-normal values, Pareto-delayed times."""
    keys = rng.zipf(1.2, n) % n_keys
    delays = np.minimum(rng.pareto(1.5, n) * 0.5, 600.0)  # most on time, a few minutes late
    values = np.clip(rng.lognormal(4.5, 1.0, n), 0, 5000)
    weights = np.round(rng.exponential(2.0, n), 2)
    return [
        {"ts": round(float(now - d), 3), "key": f"user-{k}", "value": round(float(v), 2),
         "weight": float(w)}
        for k, d, v, w in zip(keys, delays, values, weights)
    ]


class DemoFeeder:
    """Posts generated events to every demo stream about twice a second, with bursts."""

    def __init__(self, api: str, key: str, rate: float = 400.0, seed: int = 7):
        self.api, self.key, self.rate = api, key, rate
        self.rng = np.random.default_rng(seed)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(base_url=self.api, timeout=10, headers=headers) as client:
            while not self._stop.wait(0.5):
                burst = 8.0 if self.rng.random() < 0.05 else 1.0
                for stream in DEMO_STREAMS:
                    n = int(self.rng.poisson(self.rate * 0.5 * burst))
                    try:
                        client.post(f"/v1/streams/{stream}/events",
                                    json=generate(self.rng, time.time(), n))
                    except httpx.HTTPError:
                        pass  # the API restarts or stops: the next tick tries again
