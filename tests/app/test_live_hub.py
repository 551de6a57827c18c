"""LiveHub is the API process's one subscriber to publish announcements: it hands each one
to its listeners (the alert engine) at once, and from the first live client on decodes
the announced version and broadcasts the note. Real Redis, real API."""

from __future__ import annotations

import asyncio
import json
import time

import redis

from app.live_hub import LiveHub
from tests.conftest import ApiServer
from tidemark.wire import keys


def _subscribers(r) -> int:
    return dict(r.pubsub_numsub(keys.ANNOUNCE)).get(keys.ANNOUNCE.encode(), 0)


def test_an_api_process_holds_one_subscription_to_the_announcements(own_redis):
    r = redis.Redis.from_url(own_redis.url)
    server = ApiServer(own_redis.url).start()
    try:
        with server.client("read") as c, c.stream("GET", "/v1/live") as live:
            assert live.status_code == 200
            lines = live.iter_lines()
            next(lines)  # the hub serves a live client now
            deadline = time.monotonic() + 10
            while _subscribers(r) < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)  # a second subscriber (the alert engine's own, before) would be here
            assert _subscribers(r) == 1
            r.publish(keys.ANNOUNCE, json.dumps({"stream": "s", "version": 1}))
            assert any(line.startswith("data:") for line in lines)
    finally:
        server.stop()


def test_listeners_hear_every_note_and_clients_get_them_after_their_decode(own_redis):
    r = redis.Redis.from_url(own_redis.url)

    async def scenario():
        heard, prepared = [], []
        hub = LiveHub(own_redis.url, max_clients=2, prepare=prepared.append)
        hub.listen(heard.append, lambda: None)
        hub.start()
        while _subscribers(r) < 1:
            await asyncio.sleep(0.02)
        r.publish(keys.ANNOUNCE, json.dumps({"stream": "before", "version": 1}))
        while len(heard) < 1:
            await asyncio.sleep(0.02)
        assert prepared == []  # no live client yet: nothing decoded ahead
        queue = hub.subscribe()
        r.publish(keys.ANNOUNCE, json.dumps({"stream": "a", "version": 2}))
        r.publish(keys.ANNOUNCE, json.dumps({"stream": "gone", "deleted": True}))
        notes = [await asyncio.wait_for(queue.get(), 10) for _ in range(2)]
        await hub.stop()
        assert [n["stream"] for n in heard] == ["before", "a", "gone"]
        assert [n["stream"] for n in notes] == ["a", "gone"]
        assert prepared == ["a"]  # a deletion is not decoded

    asyncio.run(scenario())
