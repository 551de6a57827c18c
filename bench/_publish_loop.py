"""Publish prepared shard blobs every second, the way the worker does, with the Publisher
of whichever source tree is first on PYTHONPATH (a bench comparing two trees publishes
each tree's own published form to its own API).

    python bench/_publish_loop.py REDIS_URL BLOBS_FILE COUNT_FILE STREAM [STREAM ...]

BLOBS_FILE is a pickle of {"config": dict, "events": int, "blobs": [bytes, ...]}: stream i
publishes ``blobs[(v + i) % len(blobs)]`` as its version v. COUNT_FILE gets the number of
publishes so far after every round. Stops on SIGTERM.
"""

from __future__ import annotations

import datetime as dt
import pickle
import signal
import sys
import time

from workers.publish import Publisher


def main() -> None:
    redis_url, blobs_file, count_file, *streams = sys.argv[1:]
    with open(blobs_file, "rb") as f:
        prepared = pickle.load(f)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    publisher = Publisher(redis_url)
    done, version = 0, 2
    next_round = time.monotonic()
    while not stopping:
        version += 1
        for i, name in enumerate(streams):
            blob = prepared["blobs"][(version + i) % len(prepared["blobs"])]
            status = {"version": version, "events": prepared["events"], "late_dropped": 0,
                      "clock": prepared.get("clock"), "sizes": {}, "failed": None, "failed_events": 0,
                      "updated_at": dt.datetime.now(dt.timezone.utc).isoformat()}
            done += bool(publisher.publish(name, 0, status, blob, prepared["config"]))
        with open(count_file, "w") as f:
            f.write(str(done))
        next_round += 1.0
        time.sleep(max(0.0, next_round - time.monotonic()))


if __name__ == "__main__":
    main()
