"""A repeated query answered before the middleware stack (``app.answer_cache``) is the
answer the full way gives, for the version the stream serves, to a caller who may read it:

* asked again, the same bytes come back without the route running;
* many streams asked the same question each get their own answer;
* no answer is older than the version the stream served when the request came, while new
  versions are published under the queries;
* a request the full way would refuse (no key, a wrong key, a key without ``read``, a
  Host not answered for) is refused the same way after the answer was kept; a cookie key
  is read as the full way reads it; a large answer is gzipped only when asked;
* a statuses read that is due again runs in the background while the decoded version
  answers, and a stream declared no more ends up a 404.
"""

from __future__ import annotations

import itertools
import random
import threading
import time

import numpy as np
import pytest

import app.routes.queries as queries_route
from app.store import Store
from tests.conftest import KEYS, TEST_SECRET
from tidemark.wire import keys as redis_keys
from tidemark.chunks import decode_chunk, encode_chunk
from tidemark.streams import StreamConfig
from tidemark.summary import StreamSummary
from workers.publish import Publisher

T0 = 1_700_000_000.0
_names = (f"fast-{i}" for i in itertools.count())
CONFIG = StreamConfig(max_window=600)


def _summary(n: int, keys: list | None = None) -> StreamSummary:
    ts = T0 + np.arange(float(n))
    summary = StreamSummary.create(CONFIG, TEST_SECRET)
    summary.update_table(decode_chunk(encode_chunk(ts, keys or [None] * n, np.full(n, np.nan), np.ones(n))))
    return summary


def _declare(c, name: str) -> None:
    assert c.put(f"/v1/streams/{name}", json={"max_window": 600}).status_code in (200, 201)


def _wait_version(c, name: str, version: int) -> None:
    deadline = time.monotonic() + 15
    while c.get(f"/v1/streams/{name}").json()["status"]["sketch_version"] != version:
        assert time.monotonic() < deadline, f"{name} never served version {version}"
        time.sleep(0.02)


@pytest.fixture
def route_calls(monkeypatch):
    """How many requests reached the query route (the full way)."""
    calls = []
    original = queries_route._answer

    def counted(*args):
        calls.append(args[3])
        return original(*args)

    monkeypatch.setattr(queries_route, "_answer", counted)
    return calls


def test_asked_again_the_same_bytes_come_back_without_the_route(api, redis_url, route_calls):
    name = next(_names)
    with api.client("admin") as c:
        _declare(c, name)
        Publisher(redis_url).publish_summary(name, _summary(12), version=1, events=12)
        _wait_version(c, name, 1)
    with api.client("read") as c:
        path = f"/v1/streams/{name}/count?window=600"
        first = c.get(path)
        before = len(route_calls)
        again = [c.get(path) for _ in range(5)]
        assert first.status_code == 200 and first.json()["estimate"] == 12
        assert all(r.status_code == 200 and r.content == first.content for r in again)
        assert all(r.headers["content-type"] == "application/json" for r in again)
        assert len(route_calls) == before, "a repeated query went the full way"
        # Another spelling of the same question goes the full way once, then is kept too.
        other = c.get(f"/v1/streams/{name}/count?window=600&")
        assert other.content == first.content


def test_a_history_asked_again_is_the_same_bytes_until_a_new_version(api, redis_url, monkeypatch):
    """A history at the clock asked again while its version serves comes back before the
    route, byte for byte; once a new version serves, it is answered anew (its newest point
    is the new clock's); a federated stream's is never kept (its sites' ages move it)."""
    import app.routes.history as history_route

    calls = []
    original = history_route.answers_at
    monkeypatch.setattr(history_route, "answers_at", lambda *a, **k: calls.append(1) or original(*a, **k))
    name = next(_names)
    publisher = Publisher(redis_url)
    with api.client("admin") as c:
        _declare(c, name)
        publisher.publish_summary(name, _summary(12), version=1, events=12)
        _wait_version(c, name, 1)
    with api.client("read") as c:
        assert c.get(f"/v1/streams/{name}/count?window=60").json()["estimate"] == 12  # (decoded now)
        path = f"/v1/streams/{name}/count/history?window=60&points=20"
        first = c.get(path)
        assert first.status_code == 200 and len(first.json()["answers"]) == 20 and len(calls) == 1
        again = [c.get(path) for _ in range(3)]
        assert all(r.status_code == 200 and r.content == first.content for r in again) and len(calls) == 1, len(calls)
        publisher.publish_summary(name, _summary(30), version=2, events=30)
        _wait_version(c, name, 2)
        new = c.get(path)
        assert len(calls) == 2 and new.json()["answers"][-1]["estimate"] == 30
        assert new.json()["answers"][-1]["as_of"]["sketch_version"] == 2
        assert c.get(path).content == new.content and len(calls) == 2
        assert c.get(path, headers={"authorization": "Bearer wrong"}).status_code == 401
    # render_ahead answers the query route's questions only
    assert all(q != "history" for q, _ in api.app.state.answer_cache.asked(name, api.app.state.store.reads.served_versions(name)))


def test_many_streams_asking_one_question_each_get_their_own(api, redis_url):
    names = [next(_names) for _ in range(40)]
    publisher = Publisher(redis_url)
    with api.client("admin") as c:
        for i, name in enumerate(names):
            _declare(c, name)
            publisher.publish_summary(name, _summary(i + 1), version=1, events=i + 1)
        for name in names:
            _wait_version(c, name, 1)
        order = [(i, name) for _ in range(3) for i, name in enumerate(names)]
        random.Random(5).shuffle(order)
        for i, name in order:
            body = c.get(f"/v1/streams/{name}/count", params={"window": "600"}).json()
            assert body["estimate"] == i + 1 and body["as_of"]["sketch_version"] == 1


def test_no_answer_is_older_than_the_version_served_when_it_was_asked(api, redis_url):
    name = next(_names)
    publisher = Publisher(redis_url)
    store = api.app.state.store
    with api.client("admin") as c:
        _declare(c, name)
        publisher.publish_summary(name, _summary(1), version=1, events=1)
        _wait_version(c, name, 1)
    stop = threading.Event()

    def publish():
        for v in range(2, 40):
            if stop.wait(0.03):
                return
            publisher.publish_summary(name, _summary(v), version=v, events=v)

    publishing = threading.Thread(target=publish)
    publishing.start()
    seen = set()
    try:
        with api.client("read") as c:
            deadline = time.monotonic() + 20
            while publishing.is_alive() and time.monotonic() < deadline:
                served = sum(v for _, (_, v) in store.reads.served_versions(name) or ())
                body = c.get(f"/v1/streams/{name}/count?window=600").json()
                version = body["as_of"]["sketch_version"]
                assert version >= served, f"answered v{version} while v{served} was served"
                assert body["estimate"] == body["as_of"]["events"] == version  # its own version's answer
                seen.add(version)
    finally:
        stop.set()
        publishing.join()
    assert len(seen) > 3, "the versions did not move under the queries"


def test_what_the_full_way_refuses_stays_refused_after_an_answer_was_kept(api, redis_url):
    name = next(_names)
    with api.client("admin") as c:
        _declare(c, name)
        Publisher(redis_url).publish_summary(name, _summary(7), version=1, events=7)
        _wait_version(c, name, 1)
        path = f"/v1/streams/{name}/count?window=600"
        kept = c.get(path)
        assert kept.status_code == 200 and c.get(path).content == kept.content
    with api.client(None) as c:
        assert c.get(path).status_code == 401  # no key
        assert c.get(path, headers={"Authorization": "Bearer not-a-key"}).status_code == 401
        assert c.get(path, headers={"Authorization": f"Bearer {KEYS['ingest']}"}).status_code == 403
        assert c.get(path, headers={"Authorization": f"Bearer  {KEYS['read']}x"}).status_code == 401
        assert c.get(path, headers={"Authorization": f"Basic {KEYS['read']}"}).status_code == 401
        assert c.get(path, headers={"Authorization": "Bearer"}).status_code == 401
        evil = {"Authorization": f"Bearer {KEYS['read']}", "Host": "evil.example"}
        assert c.get(path, headers=evil).status_code == 400  # DNS rebinding: refused first
        # The sign-in cookie is a read key, also beside a non-bearer Authorization header.
        cookie = {"Cookie": f"tidemark_key={KEYS['read']}"}
        assert c.get(path, headers=cookie).content == kept.content
        assert c.get(path, headers={**cookie, "Authorization": "Basic abc"}).content == kept.content
        # A wrong bearer key is not rescued by a right cookie (the full way reads the bearer).
        assert c.get(path, headers={**cookie, "Authorization": "Bearer nope"}).status_code == 401
        assert c.get(path, headers={"Cookie": "tidemark_key=nope"}).status_code == 401
        assert c.head(path, headers=cookie).status_code in (200, 405)
    with api.client("read") as c:
        # Hostile forms of the question: each answered (or refused) exactly as the full way does.
        for query in ["window=600&window=9h", "window=9h&window=600", "window=%36%30%30", "window=",
                      "window=600&at=nan", "window=600&" + "x=" + "y" * 5000, "window=600&%00=1", "window=600&x=%FF%FE"]:
            got = [c.get(f"/v1/streams/{name}/count?{query}") for _ in range(3)]
            assert len({(r.status_code, r.content) for r in got}) == 1, query
        assert c.get(f"/v1/streams/{name}x/count?window=600").status_code == 404
        assert c.get(f"/v1/streams/{name}/nonsense?window=600").status_code in (404, 422)


def test_a_large_answer_is_gzipped_when_asked_and_only_then(api, redis_url):
    name = next(_names)
    keys = [f"key-{i % 300:04d}" for i in range(3000)]
    with api.client("admin") as c:
        _declare(c, name)
        Publisher(redis_url).publish_summary(name, _summary(3000, keys), version=1, events=3000)
        _wait_version(c, name, 1)
    path = f"/v1/streams/{name}/heavy-hitters?window=600&phi=0.001"
    with api.client("read") as c:
        plain = [c.get(path, headers={"Accept-Encoding": "identity"}) for _ in range(2)]
        packed = [c.get(path, headers={"Accept-Encoding": "gzip"}) for _ in range(2)]
    assert len(plain[0].content) >= 1024
    for r in plain:
        assert "content-encoding" not in r.headers and r.content == plain[0].content
    for r in packed:
        assert r.headers["content-encoding"] == "gzip" and r.content == plain[0].content  # httpx unpacks
        assert r.headers["vary"] == "Accept-Encoding"


def test_a_read_due_again_runs_in_the_background_while_the_decoded_version_answers(redis_url):
    name = next(_names)
    store = Store(redis_url, TEST_SECRET)
    store.declarations.declare(name, CONFIG)
    publisher = Publisher(redis_url)
    publisher.publish_summary(name, _summary(5), version=1, events=5)
    store.reads.summary(name)
    assert store.reads.in_memory(name)
    publisher.publish_summary(name, _summary(9), version=2, events=9)
    store.summaries.forget_reads(name)  # what an announcement does
    assert store.reads.in_memory(name)  # the decoded version answers; the read starts behind it
    deadline = time.monotonic() + 10
    while [(k, v) for k, (_, v) in store.reads.served_versions(name) or ()] != [(0, 2)]:
        assert time.monotonic() < deadline, "the background read never decoded the new version"
        time.sleep(0.02)
    # A read kept longer than revalidate_within: the query goes the full way.
    store.summaries._reads[name] = (-1e9, store.summaries._reads[name][1])
    store.summaries._read_at[name] = -1e9
    assert not store.reads.in_memory(name)
    # A stream declared no more (a Redis flush): the background read drops what was decoded.
    store.reads.summary(name)
    store.redis.hdel(redis_keys.STREAMS, name)
    store.summaries.forget_reads(name)
    kept = store.declarations._configs
    kept[name] = (time.monotonic() - store.declarations.config_ttl - 0.01, kept[name][1])
    assert store.reads.in_memory(name)
    deadline = time.monotonic() + 10
    while store.reads.served_versions(name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert not store.reads.in_memory(name)


def test_each_process_warms_every_single_stream_kind_off_the_start_path():
    from app.answers import QUERY_KINDS
    from app.warm import warm_answers

    assert warm_answers() == sum(q.streams == 1 for q in QUERY_KINDS.values())


def test_answers_asked_before_are_rendered_ahead_for_the_next_version(api, redis_url):
    """A newly decoded version comes with the answers last asked of its stream already
    rendered (``render_ahead``), each the very bytes the full way renders for it."""
    name = next(_names)
    publisher = Publisher(redis_url)
    with api.client("admin") as c:
        _declare(c, name)
        publisher.publish_summary(name, _summary(5, ["a"] * 5), version=1, events=5)
        _wait_version(c, name, 1)
    store, cache = api.app.state.store, api.app.state.answer_cache
    asked = ["count?window=600", "frequency?window=300&key=a", "heavy-hitters?window=600&phi=0.1"]
    with api.client("read") as c:
        for q in asked:
            assert c.get(f"/v1/streams/{name}/{q}").status_code == 200
        publisher.publish_summary(name, _summary(9, ["a"] * 9), version=2, events=9)
        store.reads.summary(name, fresh=True)  # decodes version 2 (as an alert evaluation would)
        versions = store.reads.served_versions(name)
        for q in asked:
            kind, query_string = q.split("?")
            params = dict(p.split("=") for p in query_string.split("&"))
            ahead = cache.get((name, versions, kind, tuple(sorted(params.items()))))
            assert ahead is not None, q
            assert c.get(f"/v1/streams/{name}/{q}").content == ahead
    assert b'"estimate":9' in cache.get((name, versions, "count", (("window", "600"),))).replace(b" ", b"")
