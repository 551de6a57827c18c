"""Shared fixtures: a real Redis server, one local Spark session, the running pipeline.

Everything a test needs is started here, on free ports, and stopped after.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import httpx
import pytest
from hypothesis import settings

from tidemark.hash_secret import HashSecret
from tidemark.redis_server import EmbeddedRedis, free_port

# Property tests draw the same examples on every run (``derandomize``: a seed per test), so
# ``make test`` passes or fails the same way on every clean clone: an example found only by
# a lucky draw would block every landing after it. ``TIDEMARK_EXPLORE=1`` draws new ones,
# ten times as many (``make explore``): how such cases are found, then kept as ``@example``.
# No deadline: an example's first call may compile a kernel (seconds on a clean clone,
# depending on which test reached it first in that worker), and speed is the benches' job.
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, max_examples=1000, deadline=None)
settings.load_profile("explore" if os.environ.get("TIDEMARK_EXPLORE") else "repeatable")

# ``make test`` runs in two phases: every test not marked ``serial`` on all cores at once
# (pytest-xdist), then the ``serial`` ones one at a time, alone on the machine. Serial are
# the tests that need the run's one Spark session, start worker JVMs or a whole deployment,
# or whose assertions are about time (latency, freshness, 429s while a worker lags,
# readiness within seconds): beside other tests on a 2-core machine their timing is what
# they would be testing, and a JVM's start takes twice as long (a standalone cluster's
# test took 105 s there instead of 52). The parallel phase starts with its longest test.
SERIAL = ("tests/workers/test_cluster.py", "tests/workers/test_exactly_once.py", "tests/workers/test_kill.py",
          "tests/workers/test_lifecycle.py", "tests/workers/test_many_streams.py", "tests/test_operations.py",
          "tests/test_pipeline.py", "tests/test_queries.py",
          "tests/app/test_latency_ratio.py", "tests/app/test_federation_spark.py", "tests/app/test_fast_reads.py",
          "tests/app/test_readiness.py")
FIRST = ("tests/sketches/test_compiled_codec.py::test_compiled_readers_never_crash_on_garbage",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.nodeid.startswith(SERIAL) or {"spark", "pipeline"} & set(item.fixturenames):
            item.add_marker(pytest.mark.serial)
    items.sort(key=lambda item: not item.nodeid.startswith(FIRST))  # stable: the rest keep their order


# The deployment hash secret of the test run: the API and every worker share it.
TEST_SECRET = HashSecret(bytes(range(32)))


@pytest.fixture(scope="session", autouse=True)
def compiled_kernels():
    """Numba's cache filled once, before any Spark worker would compile the kernels itself."""
    from tidemark.summary import warm_up

    warm_up()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def own_redis(tmp_path_factory):
    """A Redis of the requesting test module alone (module scope: one per module), for
    tests whose limits and quotas count everything in it."""
    server = EmbeddedRedis(tmp_path_factory.mktemp("own-redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server) -> str:
    return redis_server.url


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run."""
    from workers.job import build_spark

    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)
    session = build_spark("local[2]", partitions=2, app_name="tidemark-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


# One key per scope (contract §9), configured on every ApiServer unless a test says otherwise.
KEYS = {scope: f"test-{scope}-key-{uuid.uuid4().hex}" for scope in ("read", "ingest", "admin")}
API_KEYS = [{"key": key, "scopes": [scope]} for scope, key in KEYS.items()]
# Shared by every ApiServer of the run, so replicas share the key sealing webhook secrets.
RUN_DIR = tempfile.mkdtemp(prefix="tidemark-test-run-")


def wait_for_api(base: str, proc, what: str = "the API", ready=lambda: True, seconds: float = 60) -> None:
    """Until ``tidemark api`` (``proc``, a Popen with stderr piped) answers /healthz at ``base``
    and ``ready()`` holds; fails with its stderr if it exits first."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(f"{base}/healthz").status_code == 200 and ready():
                return
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else "exited"
        assert time.monotonic() < deadline, f"{what} did not start"
        time.sleep(0.2)


def auth(scope: str = "admin") -> dict:
    """Headers carrying the test key of ``scope``."""
    return {"Authorization": f"Bearer {KEYS[scope]}"}


class ApiServer:
    """The real FastAPI app under uvicorn, in a thread, on a free port.

    Configured with one API key per scope (``KEYS``); ``client()`` and ``headers`` carry
    the admin key unless asked for another scope. Webhooks may go to 127.0.0.1 (the
    tests' receivers) unless ``webhook_allow_hosts`` says otherwise.
    """

    def __init__(self, redis_url: str, **settings):
        import uvicorn

        from app.main import create_app
        from tidemark.settings import Settings

        settings.setdefault("api_keys", API_KEYS)
        settings.setdefault("run_dir", RUN_DIR)
        settings.setdefault("webhook_allow_hosts", ["127.0.0.1"])
        self.port = free_port()
        settings.setdefault("hash_secret", TEST_SECRET.secret.hex())
        self.headers = auth("admin")
        self.keys = KEYS
        self.app = create_app(Settings(redis_url=redis_url, **settings), redis_url)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning",
                                timeout_graceful_shutdown=2)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, scope: str | None = "admin", **kwargs) -> httpx.Client:
        """An HTTP client for this server with the key of ``scope`` (None: no key)."""
        headers = {**(auth(scope) if scope else {}), **kwargs.pop("headers", {})}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kwargs.pop("timeout", 30),
                            **kwargs)

    def start(self) -> "ApiServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("API did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session")
def api(redis_url):
    server = ApiServer(redis_url).start()
    yield server
    server.stop()


def post_events(c: httpx.Client, stream: str, timeout: float = 90.0, **kwargs) -> httpx.Response:
    """POST events as a client honouring back-pressure does (contract §5): a 429 is sent
    again after its Retry-After, until ``timeout``. On a loaded machine the worker may lag
    past what the API promises for a while: a 429 then is the contract kept, not a failure
    of what the test checks."""
    deadline = time.monotonic() + timeout
    while True:
        r = c.post(f"/v1/streams/{stream}/events", **kwargs)
        if r.status_code != 429 or time.monotonic() > deadline:
            return r
        time.sleep(min(float(r.headers.get("Retry-After", "1")), 5.0))


@dataclass
class Pipeline:
    api: str
    redis_url: str
    worker: object
    query: object
    checkpoint: str

    def client(self, scope: str = "admin") -> httpx.Client:
        return httpx.Client(base_url=self.api, timeout=30, headers=auth(scope))

    def wait_events(self, stream: str, n: int, timeout: float = 90.0) -> dict:
        """Block until the published sketches reflect ``n`` events; return the status."""
        deadline = time.monotonic() + timeout
        status = {}
        with self.client() as c:
            while time.monotonic() < deadline:
                status = c.get(f"/v1/streams/{stream}").json()["status"]
                if status["events"] + status["late_dropped"] >= n:
                    return status
                time.sleep(0.2)
        raise AssertionError(f"stream {stream} reached {status} instead of {n} events")


@pytest.fixture(scope="session")
def pipeline(spark, redis_url, api, tmp_path_factory):
    from workers.job import start

    checkpoint = str(tmp_path_factory.mktemp("checkpoint"))
    query, driver = start(spark, redis_url, checkpoint, trigger="300 milliseconds", secret=TEST_SECRET)
    p = Pipeline(api.url, redis_url, driver, query, checkpoint)
    yield p
    driver.stop_event.set()
    p.query.stop()


@pytest.fixture
def stream_name() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"
