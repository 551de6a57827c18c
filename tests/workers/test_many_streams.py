"""Many streams at once, as users run Tidemark: one stream per tenant or endpoint.

Real Redis, the real API (uvicorn) and the streaming query on the shared local Spark
session. Hundreds of streams posting at once are all visible within seconds, with 10,000
declared; a flood on one stream beside trickles on many: the flood gets the 429s, the
trickles keep flowing and stay fresh, and nothing accepted is counted late or twice.
"""

from __future__ import annotations

import io
import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.conftest import TEST_SECRET, ApiServer
from tidemark.wire import keys
from tidemark.redis_server import EmbeddedRedis
from tidemark.streams import StreamConfig
from workers.job import start

pytestmark = pytest.mark.spark
T0 = time.time() - 600
CONFIG = StreamConfig(max_window="1h").model_dump_json()


def _declare_many(api: ApiServer, names: list[str]) -> None:
    """Declared as PUT would (the API's own store), in one round trip for thousands."""
    store = api.app.state.store
    store.redis.hset(keys.STREAMS, mapping={n: CONFIG for n in names})
    store.redis.set(keys.SHARDS_MAX, 1)  # as the declare script keeps it (back-pressure reads it)


def _counted(c: httpx.Client, names: list[str]) -> dict[str, int]:
    out = {}
    for name in names:
        status = c.get(f"/v1/streams/{name}").json()["status"]
        out[name] = status["events"] + status["late_dropped"]
    return out


def _published(r, names: list[str]) -> dict[str, int]:
    """Events the published shards of each stream count (one pipelined read, so a poll of
    1,000 streams takes milliseconds and every stream is looked at every poll)."""
    with r.pipeline(transaction=False) as p:
        for n in names:
            p.hvals(keys.shard_status(n))
        raw = p.execute()
    return {n: sum(json.loads(v)["events"] for v in vals) for n, vals in zip(names, raw)}


def _waits(accepted: dict[str, list[tuple[float, int]]], polls: list[tuple[float, dict]]) -> list[float]:
    """Per 202: seconds from its answer until a poll showed its stream counting everything
    accepted up to it (a 202 still not counted at the last poll: until the last poll)."""
    out = []
    for name, answers in accepted.items():
        for at, total in answers:
            seen = [t for t, counts in polls if t >= at and counts.get(name, 0) >= total]
            out.append((seen[0] if seen else polls[-1][0]) - at)
    return out


def _offset_bytes(checkpoint: str) -> int:
    """The largest source offset Spark's offset log holds (its line of each batch file)."""
    files = Path(checkpoint, "spark", "offsets").glob("[0-9]*")
    return max(len(f.read_text().splitlines()[2]) for f in files)


def test_a_thousand_of_ten_thousand_streams_posting_at_once_are_all_counted_within_seconds(spark, tmp_path):
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url, max_streams=20_000).start()
        checkpoint = str(tmp_path / "checkpoint")
        query, driver = start(spark, server.url, checkpoint, "500 milliseconds", TEST_SECRET, 2)
        try:
            declared = [f"tenant-{i}" for i in range(10_000)]
            active = declared[::10]  # 1,000 active
            _declare_many(api, declared)
            with api.client() as c:
                assert c.put("/v1/streams/warm", json={"max_window": "1h"}).status_code in (200, 201)
                assert c.post("/v1/streams/warm/events", json=[{"ts": T0}]).status_code == 202
                deadline = time.monotonic() + 120
                while _counted(c, ["warm"])["warm"] < 1:  # the query is running
                    assert time.monotonic() < deadline
                    time.sleep(0.2)

            refused = []
            accepted: dict[str, list[tuple[float, int]]] = {}
            polls: list[tuple[float, dict]] = []
            posting = threading.Event()

            def post(name: str) -> float:
                """As a user's client does: a 429 is retried after its Retry-After."""
                with httpx.Client(base_url=api.url, headers=api.headers, timeout=30) as c:
                    while True:
                        r = c.post(f"/v1/streams/{name}/events",
                                   json=[{"ts": T0 + i, "key": f"k{i % 3}"} for i in range(10)])
                        if r.status_code != 429:
                            assert r.status_code == 202, r.text
                            accepted[name] = [(time.monotonic(), 10)]
                            return time.monotonic()
                        assert 1 <= int(r.headers["Retry-After"]) <= 60
                        refused.append(int(r.headers["Retry-After"]))
                        time.sleep(int(r.headers["Retry-After"]))

            def watch():  # every active stream's published count, every 0.25 s
                r = api.app.state.store.redis
                while posting.is_set() or len(polls) < 2 or min(polls[-1][1].values()) < 10:
                    polls.append((time.monotonic(), _published(r, active)))
                    if time.monotonic() - began > 400:
                        return
                    time.sleep(0.25)

            began = time.monotonic()
            posting.set()
            watcher = threading.Thread(target=watch)
            watcher.start()
            with ThreadPoolExecutor(16) as pool:
                last_post = max(pool.map(post, active))
            posting.clear()
            watcher.join()
            # The 202 promise: nothing accepted waits past TIDEMARK_READY_MAX_WAIT (10 s) to
            # be counted; what the worker could not take in time was refused with 429 instead.
            waits = _waits(accepted, polls)
            assert len(waits) == len(active)
            assert max(waits) <= 10.0 + 0.5, (f"{sum(w > 10 for w in waits)} of {len(waits)} "
                                               f"202s counted after more than 10 s: {sorted(waits)[-5:]}")
            with api.client() as c:
                deadline = time.monotonic() + 60
                left = set(active)
                while left:
                    assert time.monotonic() < deadline, f"{len(left)} streams still not counted"
                    done = _counted(c, sorted(left)[:200])
                    left -= {n for n, k in done.items() if k == 10}
                    time.sleep(0.2)
                visible_after = time.monotonic() - last_post
                assert visible_after < 20.0  # on this shared 2-core machine; "seconds"
                # exactly once: nothing counted twice, idle declared streams untouched
                assert set(_counted(c, active[:50]).values()) == {10}
                assert c.get(f"/v1/streams/{declared[1]}").json()["status"]["events"] == 0
            # The offset log names 2 partitions, not 1,000 streams.
            assert _offset_bytes(checkpoint) < 120
            print(f"1,000 of 10,000 streams: posted in {last_post - began:.1f} s ({len(refused)} "
                  f"429s), all visible {visible_after:.1f} s after the last 202; 202 -> counted "
                  f"p50 {statistics.median(waits):.1f} s, max {max(waits):.1f} s")
        finally:
            driver.stop_event.set()
            query.stop()
            api.stop()


def _arrow(n: int, first: float) -> bytes:
    table = pa.table({"ts": pa.array(first + np.arange(n) * 1e-3), "key": pa.array(
        [f"k{i % 50}" for i in range(n)])})
    sink = io.BytesIO()
    with ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def test_a_flood_on_one_stream_gets_the_429s_and_the_trickles_beside_it_stay_fresh(spark, tmp_path):
    max_wait = 10.0  # TIDEMARK_READY_MAX_WAIT's default
    with EmbeddedRedis(tmp_path / "redis") as server:
        api = ApiServer(server.url, ready_max_wait=max_wait).start()
        checkpoint = str(tmp_path / "checkpoint")
        query, driver = start(spark, server.url, checkpoint, "500 milliseconds", TEST_SECRET, 2)
        trickles = [f"trickle-{i}" for i in range(50)]
        stop = threading.Event()
        flood = {"accepted": 0, "refused": 0, "retry_after": set()}
        trickle = {"accepted": 0, "refused": 0, "posted_at": {}}
        answers: dict[str, list[tuple[float, int]]] = {n: [] for n in ["flood", *trickles]}
        lock = threading.Lock()
        try:
            with api.client() as c:
                for name in ["flood", *trickles]:
                    c.put(f"/v1/streams/{name}", json={"max_window": "1h"})
                assert c.post("/v1/streams/flood/events", json=[{"ts": T0}]).status_code == 202
                deadline = time.monotonic() + 120
                while _counted(c, ["flood"])["flood"] < 1:
                    assert time.monotonic() < deadline
                    time.sleep(0.2)
            flood["accepted"] = 1
            body = _arrow(20_000, T0)

            def flood_client():
                with httpx.Client(base_url=api.url, timeout=60, headers={
                        **api.headers, "content-type": "application/vnd.apache.arrow.stream"}) as c:
                    while not stop.is_set():
                        r = c.post("/v1/streams/flood/events", content=body)
                        if r.status_code == 202:
                            with lock:
                                flood["accepted"] += r.json()["accepted"]
                                answers["flood"].append((time.monotonic(), flood["accepted"]))
                        else:
                            assert r.status_code == 429, r.text
                            flood["refused"] += 1
                            flood["retry_after"].add(int(r.headers["Retry-After"]))
                            time.sleep(0.05)  # an impatient client: retry at once

            def trickle_client(names):
                with httpx.Client(base_url=api.url, headers=api.headers, timeout=60) as c:
                    k = 0
                    while not stop.is_set():
                        for name in names:
                            r = c.post(f"/v1/streams/{name}/events",
                                       json=[{"ts": T0 + k + i * 0.01} for i in range(10)])
                            if r.status_code == 202:
                                trickle["accepted"] += 10
                                trickle["posted_at"][(name, k)] = time.monotonic()
                                answers[name].append((time.monotonic(), 10 * (len(answers[name]) + 1)))
                            else:
                                assert r.status_code == 429, r.text
                                trickle["refused"] += 1
                                trickle["why"] = r.json()["detail"]
                        k += 1
                        time.sleep(1.0)

            threads = [threading.Thread(target=flood_client) for _ in range(4)]
            threads += [threading.Thread(target=trickle_client, args=(trickles[i::4],)) for i in range(4)]
            for t in threads:
                t.start()
            # Watch every stream's published count (a pipelined read every 0.25 s): the
            # seconds from each 202 until it is counted, the flood's and the trickles'.
            polls: list[tuple[float, dict]] = []
            r_pub = api.app.state.store.redis
            until = time.monotonic() + 25
            while time.monotonic() < until:
                polls.append((time.monotonic(), _published(r_pub, ["flood", *trickles])))
                time.sleep(0.25)
            stop.set()
            for t in threads:
                t.join(60)
            while True:  # until every 202 of the load is counted (or 30 s, then it fails)
                polls.append((time.monotonic(), _published(r_pub, ["flood", *trickles])))
                if (polls[-1][1]["flood"] >= flood["accepted"] and all(
                        polls[-1][1][n] >= 10 * len(answers[n]) for n in trickles)) \
                        or polls[-1][0] - until > 30:
                    break
                time.sleep(0.25)
            waits = {n: _waits({n: answers[n]}, polls) for n in answers}
            fresh = [w for n in trickles for w in waits[n]]
            flood_waits = waits["flood"]
            with api.client() as c:
                deadline = time.monotonic() + 90
                while True:  # everything accepted is counted, once
                    counted = _counted(c, ["flood", *trickles])
                    if counted["flood"] == flood["accepted"] and sum(
                            counted[n] for n in trickles) == trickle["accepted"]:
                        break
                    assert time.monotonic() < deadline, (counted["flood"], flood)
                    time.sleep(0.5)
                lag = c.get("/readyz").json()["lag"]
            p95 = float(np.percentile(fresh, 95)) if fresh else 0.0
            print(f"flood: {flood['accepted']} events accepted, {flood['refused']} 429s "
                  f"(Retry-After {sorted(flood['retry_after'])}); trickles: {trickle['accepted']} "
                  f"accepted, {trickle['refused']} 429s, freshness p50 "
                  f"{statistics.median(fresh) if fresh else 0:.2f} s p95 {p95:.2f} s max {max(fresh):.2f} s; "
                  f"flood 202 -> counted max {max(flood_waits):.2f} s; lag {json.dumps(lag)[:200]}")
            # The flood gets the 429s (and is told when to come back); the trickles far fewer
            # (on this shared 2-core machine the worker's cost fit still lets a flood's burst
            # through now and then, and everybody waits for its batch: see bench/README.md).
            trickle_requests = trickle["accepted"] // 10 + trickle["refused"]
            flood_requests = (flood["accepted"] - 1) // 20_000 + flood["refused"]
            assert flood["refused"] > 0 and flood["retry_after"] <= set(range(1, 11))
            assert trickle["refused"] / trickle_requests < 0.75 * flood["refused"] / flood_requests, \
                trickle.get("why")
            assert len(fresh) > 50 and p95 <= max_wait  # the accepted trickles stay fresh
            # The 202 promise, for the flood as for the trickles: nothing accepted is counted
            # later than TIDEMARK_READY_MAX_WAIT (+ the 0.25 s poll); the excess got 429s.
            worst = max(fresh + flood_waits)
            assert worst <= max_wait + 0.5, (
                f"counted {worst:.1f} s after its 202 (flood max {max(flood_waits):.1f} s, "
                f"trickles max {max(fresh):.1f} s)")
        finally:
            stop.set()
            driver.stop_event.set()
            query.stop()
            api.stop()
