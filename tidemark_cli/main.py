"""The ``tidemark`` command: up, demo, ingest, streams, worker, api (contract §2)."""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import yaml
from pydantic import ValidationError

from tidemark.errors import CliError
from tidemark.settings import Settings
from tidemark.streams import STREAM_NAME_PATTERN, StreamConfig

__all__ = ["main"]


# -- configuration -----------------------------------------------------------------------
def load_streams(path: str | None) -> dict[str, StreamConfig]:
    if not path:
        return {}
    from tidemark import capacity  # imports the sketches: not before a worker starts Spark
    try:
        raw = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise CliError(f"cannot read config {path}: {e}") from None
    streams = raw.get("streams") or {}
    if not isinstance(streams, dict):
        raise CliError(f"{path}: 'streams' must be a mapping of name -> settings")
    out = {}
    for name, settings in streams.items():
        if not re.fullmatch(STREAM_NAME_PATTERN, str(name)):
            raise CliError(f"{path}: stream name {str(name)[:80]!r} is not valid: letters, digits, "
                           "'_', '.', '-', at most 64, starting with a letter or digit")
        try:
            out[str(name)] = StreamConfig.model_validate(settings or {})
            capacity.check(out[str(name)], Settings().max_summary_bytes)
        except capacity.CapacityError as e:
            raise CliError(f"{path}: stream {name!r}: {e}") from None
        except ValueError as e:
            first = str(e).splitlines()
            raise CliError(f"{path}: stream {name!r}: {' '.join(first[1:3]) or first[0]}") from None
    return out


def declare_streams(redis_url: str, streams: dict[str, StreamConfig]) -> None:
    from app.store import Store

    store = Store(redis_url)
    for name, config in streams.items():
        store.declarations.declare(name, config)


# -- processes ---------------------------------------------------------------------------
def _spawn(args: list[str], env: dict | None = None, stdin=None,
           log: Path | None = None) -> subprocess.Popen:
    """Start a service (one supervised process); its standard output and error go to ``log`` (appended) when given."""
    output = open(log, "ab") if log else None
    try:
        return subprocess.Popen([sys.executable, "-m", "tidemark_cli", *args], stdin=stdin,
                                stdout=output, stderr=subprocess.STDOUT if output else None,
                                start_new_session=True, env={**os.environ, **(env or {})})
    finally:
        if output:
            output.close()  # the child holds its own copy


def _stop(proc: subprocess.Popen | None, timeout: float = 30.0) -> None:
    """Stop a service and everything in its process group, even when its leader is gone."""
    if proc is None:
        return
    if proc.poll() is None:
        # SIGTERM to the service's leader only: the worker stops its query and Spark; a JVM
        # signalled at the same time would stop its SparkContext under the driver's feet.
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    try:  # anything the child left in its group (Spark's JVM, Python workers)
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if proc.stdin:  # a standby worker's pipe
        proc.stdin.close()


def _ready(url: str, timeout: float = 2.0) -> bool:
    return _readiness(url, timeout)[0] is True


def _readiness(url: str, timeout: float = 2.0) -> tuple[bool | None, dict | None]:
    """``/readyz``: (ready, its body); (None, None) when the API does not answer."""
    try:
        r = httpx.get(f"{url}/readyz", timeout=timeout)
    except httpx.HTTPError:
        return None, None
    try:
        body = r.json()
    except ValueError:
        body = None
    return r.status_code == 200, body


def _answers(url: str, path: str) -> bool:
    try:
        return httpx.get(f"{url}{path}", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _services(args, settings: Settings, run_dir: Path, env: dict, streams: dict, log=_log):
    """The services ``up`` supervises: embedded Redis (unless --redis), worker, API.
    The configured streams are declared before the worker and the API start. Without
    ``--verbose`` the worker's and the API's output (Spark's and the JVM's included) go
    to ``logs/worker.log`` and ``logs/api.log`` under the run directory."""
    logs = None if getattr(args, "verbose", True) else run_dir / "logs"
    if logs:
        logs.mkdir(parents=True, exist_ok=True)
    worker_log = logs / "worker.log" if logs else None
    api_log = logs / "api.log" if logs else None
    from tidemark.redis_server import EmbeddedRedis
    from tidemark_cli.standby import WorkerSlot
    from tidemark.supervisor import Service

    redis_url = args.redis or settings.redis_url
    services = []
    if redis_url:
        declare_streams(redis_url, streams)
    else:
        embedded = EmbeddedRedis(run_dir / "redis")
        redis_url = embedded.url  # the same port and password on every restart

        def start_redis():
            embedded.start()
            declare_streams(redis_url, streams)  # a no-op once Redis has them
            return embedded.process

        services.append(Service("redis", start_redis, lambda _: embedded.stop()))
    checkpoint = args.checkpoint or settings.checkpoint
    master = args.master or settings.spark_master
    worker_args = ["worker", "--redis", redis_url, "--checkpoint", checkpoint]
    if args.master:
        worker_args += ["--master", args.master]
    slot = None
    if settings.standby_worker and (not master or master.startswith("local")):
        # A spare with its own local Spark (on a cluster it would hold executors idle).
        slot = WorkerSlot(lambda standby: _spawn(worker_args + ["--standby"] * standby, env,
                                                 subprocess.PIPE if standby else None, worker_log),
                          _stop, log, discard=lambda spare: _stop(spare, timeout=0.0))
    services.append(Service("worker", slot.start if slot else
                            lambda: _spawn(worker_args, env, log=worker_log), _stop))
    api_args = ["api", "--redis", redis_url, "--host", args.host, "--port", str(args.port)]
    services.append(Service("api", lambda: _spawn(api_args, env, log=api_log), _stop))
    return services, redis_url, slot


def run_up(args, demo: bool = False) -> None:
    from app.store import Store
    from tidemark_cli.console import Console, Watch
    from tidemark.credentials import ensure_api_keys
    from tidemark.hash_secret import load_or_create
    from tidemark.supervisor import STATE_FILE, GiveUp, Supervisor, stop_on_signals

    settings = Settings()
    keys, generated = ensure_api_keys(settings)
    admin = next((k.key for k in keys if "admin" in k.scopes), None)
    streams = load_streams(args.config)
    if demo:
        from tidemark_cli.demo import DEMO_STREAMS

        streams = {**DEMO_STREAMS, **streams}
    run_dir = Path(settings.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = args.checkpoint or settings.checkpoint
    console = Console()
    logs = run_dir / "logs"

    def say(line: str) -> None:
        if not args.verbose and " worker " in f" {line} " and "restarting" in line:
            line += f" (its output: {logs / 'worker.log'})"
        console.say(line)

    # One hash secret for the worker and the API, kept beside the worker's checkpoint.
    env = {"TIDEMARK_HASH_SECRET": load_or_create(checkpoint, settings.hash_secret).secret.hex()}
    console.say(f"Starting Tidemark{' (demo)' if demo else ''}"
                + ("" if args.verbose else f"; the engine's output goes to {logs}/ (--verbose shows it)"))
    services, redis_url, slot = _services(args, settings, run_dir, env, streams, say)
    supervisor = Supervisor(services, settings.max_restarts, settings.restart_window,
                            state_file=run_dir / STATE_FILE, log=say)
    stopping = stop_on_signals()
    generator = None
    try:
        try:
            supervisor.start()
        except RuntimeError as e:  # redis-server missing or not starting
            raise CliError(str(e)) from None
        url = f"http://{args.host}:{args.port}"
        store = Store(redis_url)
        deadline = time.monotonic() + 180
        while not stopping.is_set():
            if time.monotonic() > deadline:
                raise CliError(f"not ready after 180 s: see {logs}/" if not args.verbose
                               else "not ready after 180 s: see the logs above")
            supervisor.tick()
            _phases(console, store, url)
            if console.waiting() is None:
                break
            time.sleep(0.25)
        if stopping.is_set():
            return
        if generated:
            console.say(f"Tidemark is up: dashboard at {url}/?key={generated}  (API docs at {url}/docs)\n"
                        f"  admin API key (kept in {run_dir / 'api-key'}): "
                        f"send 'Authorization: Bearer <key>'")
        else:
            console.say(f"Tidemark is up: dashboard at {url}/?key=<a read key>  (API docs at {url}/docs)")
        if demo:
            from tidemark_cli.demo import DemoFeeder

            if admin is None:
                raise CliError("the demo needs an admin key in TIDEMARK_API_KEYS to declare and feed streams")
            generator = DemoFeeder(url, admin)
            generator.start()
        watch = Watch(say)
        checked_at = 0.0
        while not stopping.is_set():
            supervisor.tick()
            if time.monotonic() - checked_at > 2:
                checked_at = time.monotonic()
                ready, body = _readiness(url, timeout=0.5)  # never holds up noticing a death
                watch.readiness(ready, body)
                if slot:  # a spare once all is processing
                    slot.tend(ready is True)
                try:
                    watch.streams(store.summaries.failed_streams())
                except Exception:  # noqa: BLE001 — Redis restarting: the supervisor says so
                    pass
            time.sleep(0.2)
    except GiveUp as e:
        raise CliError(str(e)) from None
    finally:
        if generator:
            generator.stop()
        if slot:
            slot.close()
        supervisor.stop()
        console.say("Tidemark stopped.")


def _phases(console, store, url: str) -> None:
    """Mark the phases of a start that are done now (seen from the outside)."""
    if "Redis" not in console.done and store.health.ping():
        console.phase_done("Redis")
    if "worker" not in console.done and "Redis" in console.done:
        try:
            beat = store.health.worker_heartbeat()
        except Exception:  # noqa: BLE001
            beat = None
        if beat and beat.get("active") and time.time() - beat.get("time", 0) < 5:
            console.phase_done("worker", "Spark streaming query running")
    if "API" not in console.done and _answers(url, "/healthz"):
        console.phase_done("API", url)
    if "first batch" not in console.done and {"worker", "API"} <= set(console.done) and _ready(url, 1.0):
        console.phase_done("first batch", "processing")
    console.tick({"Redis": "starting", "worker": "starting Spark (a JVM, the session, the query)",
                  "API": "starting", "first batch": "the first micro-batch"}.get(console.waiting() or "", ""))


def _yield_cpu(nice: int) -> None:
    """Lower this process's CPU priority before Spark starts (its JVM and Python workers
    inherit it): on a machine shared with the API, answers come first and the batches
    take what is left; alone, the worker loses nothing. Under autogroup scheduling
    (Linux's default on desktops and many servers) a niceness counts only against the
    same session, so a worker leading its own session (as ``tidemark up`` starts it) sets
    its session's too; one run from a terminal leaves the terminal's session alone."""
    os.nice(nice)
    if os.getsid(0) == os.getpid():
        try:
            Path("/proc/self/autogroup").write_text(str(nice))
        except OSError:  # no autogroup scheduling here: the niceness alone counts
            pass


def run_worker(args) -> None:
    from workers.job import main as worker_main

    settings = Settings()
    redis_url = args.redis or settings.redis_url
    if not redis_url:
        raise CliError("the worker needs --redis URL (or REDIS_URL)")
    from tidemark.hash_secret import load_or_create

    checkpoint = args.checkpoint or settings.checkpoint
    if settings.worker_nice:
        _yield_cpu(settings.worker_nice)
    worker_main(redis_url, checkpoint, args.master or settings.spark_master,
                args.partitions or settings.state_partitions, settings.trigger,
                load_or_create(checkpoint, settings.hash_secret), settings.spark_conf,
                settings.warm_workers, standby=args.standby,
                log_partitions=settings.log_partitions)


def _api_settings(args=None) -> tuple[Settings, str]:
    """The API's settings and Redis URL: from ``args`` in the parent, from the environment
    the parent set in each worker process."""
    from tidemark.credentials import ensure_api_keys

    settings = Settings(host=args.host, port=args.port) if args else Settings()
    redis_url = (args.redis if args else None) or settings.redis_url
    if not redis_url:
        raise CliError("the API needs --redis URL (or REDIS_URL)")
    keys, generated = ensure_api_keys(settings)
    if generated and args:
        print(f"tidemark api: no TIDEMARK_API_KEYS; using the admin key in "
              f"{Path(settings.run_dir) / 'api-key'}", file=sys.stderr, flush=True)
    return settings.model_copy(update={"api_keys": keys}), redis_url


def run_api(args) -> None:
    from tidemark_cli.serve import api_processes, serve, tune

    settings, redis_url = _api_settings(args)
    declare_streams(redis_url, load_streams(args.config))
    processes = api_processes(args.workers or settings.api_workers)
    if processes == 1:
        import uvicorn

        from app.main import create_app

        tune()
        # Open dashboards hold /v1/live streams: give them 2 s, then stop regardless.
        uvicorn.run(create_app(settings, redis_url), host=args.host, port=args.port, log_level="warning",
                    timeout_graceful_shutdown=2)
        return
    # The files every process reads (API key, hash secret, webhook-secret key) are made
    # here, once, before they start.
    from tidemark.credentials import secret_key
    from tidemark.hash_secret import load_or_create

    load_or_create(settings.checkpoint, settings.hash_secret)
    secret_key(settings)
    if "TIDEMARK_INGEST_PROCESSES" not in os.environ:
        # Several API processes already validate posts side by side: an ingest process
        # beside each (150 MB apiece) buys nothing more here.
        settings = settings.model_copy(update={"ingest_processes": 0})
    serve(settings, redis_url, processes, args.host, args.port)


def run_streams(args) -> None:
    from tidemark_cli.streams_client import delete_stream, list_streams, print_streams, the_key

    key = the_key(args.key)
    if args.action == "list":
        print_streams(list_streams(args.api, key))
        return
    if not args.yes:
        if not sys.stdin.isatty():
            raise CliError("deleting a stream cannot be undone: add --yes to confirm")
        answer = input(f"Delete stream {args.name!r}, its answers, pending events and alerts? "
                       "Type its name to confirm: ")
        if answer.strip() != args.name:
            raise CliError("not confirmed; nothing deleted")
    delete_stream(args.api, key, args.name)
    print(f"deleted stream {args.name!r}; the name may be declared again at once")


def run_ingest(args) -> None:
    from tidemark_cli.ingest_client import send_files

    send_files(args.api, args.stream, args.files, args.batch,
               key=args.key or os.environ.get("TIDEMARK_KEY"), retry_for=args.retry_for)


# -- argument parsing ----------------------------------------------------------------------
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tidemark", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("up", "demo"):
        s = sub.add_parser(name, help="start Redis, the worker and the API" +
                           (" with live generated data" if name == "demo" else ""))
        s.add_argument("--config", help="YAML file with a 'streams:' mapping")
        s.add_argument("--port", type=int, default=8000)
        s.add_argument("--host", default="127.0.0.1")
        s.add_argument("--redis", help="use this Redis instead of an embedded one")
        s.add_argument("--master", help="Spark master URL (default local[*])")
        s.add_argument("--checkpoint", help="worker state location (path or pyarrow.fs URI)")
        s.add_argument("--verbose", action="store_true",
                       help="show the services' own output (Spark, the JVM) instead of keeping it "
                       "in logs/ under the run directory")
    s = sub.add_parser("ingest", help="send NDJSON or CSV event files to a stream")
    s.add_argument("--stream", required=True)
    s.add_argument("--api", default="http://127.0.0.1:8000")
    s.add_argument("--batch", type=int, default=5000, help="events per request")
    s.add_argument("--key", help="API key with the 'ingest' scope (default: $TIDEMARK_KEY)")
    s.add_argument("--retry-for", type=float, default=300.0, metavar="SECONDS",
                   help="keep retrying a request on 429, 503 or a dropped connection this long")
    s.add_argument("files", nargs="+")
    s = sub.add_parser("streams", help="list streams, or delete one")
    actions = s.add_subparsers(dest="action", required=True)
    for action in ("list", "delete"):
        a = actions.add_parser(action, help="the streams the key may see" if action == "list"
                               else "delete a stream: its answers, pending events, alerts and "
                               "state; the name is free again")
        if action == "delete":
            a.add_argument("name")
            a.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        a.add_argument("--api", default="http://127.0.0.1:8000")
        a.add_argument("--key", help="API key (default: $TIDEMARK_KEY, else the run directory's)")
    s = sub.add_parser("worker", help="run the Spark worker")
    s.add_argument("--redis")
    s.add_argument("--master")
    s.add_argument("--checkpoint")
    s.add_argument("--partitions", "--shards", type=int, dest="partitions",
                   help="Spark state partitions (fixed for the life of a checkpoint)")
    s.add_argument("--standby", action="store_true",
                   help="start Spark and plan the query, then start it only when the line "
                   "'go' arrives on standard input (exit when it closes): the spare that "
                   "'tidemark up' keeps")
    s = sub.add_parser("api", help="run the API and dashboard")
    s.add_argument("--redis")
    s.add_argument("--config")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--workers", type=int, help="API processes on the port (default "
                   "TIDEMARK_API_WORKERS, else one per core beside the worker's, at least 2 on "
                   "two cores or more)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        {"up": run_up, "demo": lambda a: run_up(a, demo=True), "ingest": run_ingest,
         "worker": run_worker, "api": run_api, "streams": run_streams}[args.command](args)
    except CliError as e:
        print(f"tidemark: error: {e}", file=sys.stderr)
        return 1
    except ValidationError as e:  # a TIDEMARK_* setting that does not validate
        err = e.errors()[0]
        where = ".".join(str(x) for x in err.get("loc", ())) or "settings"
        msg = err.get('msg', 'invalid').removeprefix('Value error, ')
        print(f"tidemark: error: setting {where}: {msg} "
              "(see docs/operations.md: Configuration and Security)", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
