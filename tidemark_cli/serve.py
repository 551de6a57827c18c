"""Several API processes on one port (``tidemark api``, ``tidemark up``).

How many: ``TIDEMARK_API_WORKERS`` / ``--workers``, else chosen from the machine
(:func:`api_processes`): one per core the worker leaves spare, and at least two on a
machine of two cores or more, since one process's event loop (its GIL) is a single core
however many the machine has — on two cores two processes answered 1.6x the queries of
one beside a working worker (bench/README.md, ``bench_query_latency.py``).

How: the parent imports the app and loads the answers' compiled kernels once, then forks
the processes, which share those pages copy-on-write (Numba and its kernels are most of
an API process's memory) and each build their own app: their own Redis connections,
decoded summaries, answer caches, publish subscription and alert engine (alert deliveries
are claimed through Redis, so each fires once). Each binds its own listening socket with
``SO_REUSEPORT``, so the kernel spreads new connections evenly over them (with one shared
socket the busiest process tends to accept the most). The parent forks before any thread
of its own starts, restarts a process that dies, and stops them all on SIGTERM or SIGINT.

Tested by: tests/app/test_api_workers.py (several processes on one port, api_processes),
tests/test_operations.py (`up` serving the configured streams, and stopping cleanly).
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time

__all__ = ["api_processes", "serve", "tune"]

_GRACE = 10.0  # seconds the processes get to finish (uvicorn's graceful shutdown is 2 s)
SWITCH_INTERVAL = 0.001  # s; CPython's default is 0.005


def tune() -> None:
    """What an API process sets before it serves. A thread that wants the GIL back (the
    event loop after a background read or render; a ``/readyz`` probe after each Redis
    reply) waits up to the switch interval for it: 5 ms by default, a whole query's budget
    several times over. At 1 ms the loop and the probe get it back sooner; the cost is a
    few more hand-overs a second while threads compete."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def api_processes(configured: int | None, cores: int | None = None) -> int:
    """The number of API processes: ``configured`` when set, else one per core beside the
    worker's one, at least 2 where there are two cores or more (1 on one core)."""
    if configured:
        return configured
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return 1 if cores < 2 else max(2, cores - 1)


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket of this process's own on ``host:port``, shared by port with the
    other API processes (``SO_REUSEPORT``)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(address)
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _check_free(host: str, port: int) -> None:
    """Fail at once, in the parent, when the port is taken by anything else (a bound socket
    that never listens takes no connections)."""
    family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                         flags=socket.AI_PASSIVE)[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        try:
            probe.bind(address)
        except OSError as e:
            from tidemark.errors import CliError

            raise CliError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def _child(settings, redis_url: str, host: str, port: int, parent: int) -> None:
    """One API process: its own app and socket; leaves when the parent is gone."""
    import uvicorn

    from app.child_process import exit_with_parent
    from app.main import create_app

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    _die_with_parent()
    exit_with_parent(parent)  # where the kernel cannot say so (and a parent gone before the line above)
    tune()
    sock = _listen(host, port)
    config = uvicorn.Config(create_app(settings, redis_url), log_level="warning", timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])


def _die_with_parent() -> None:
    """Linux: the kernel kills this process the moment its parent dies (a parent killed
    with SIGKILL cannot stop its processes, and they would go on answering on the port)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _fork(target) -> int:
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            target()
        except BaseException:  # noqa: BLE001 — a child never returns into the parent's code
            import traceback

            traceback.print_exc()
            code = 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return pid


def serve(settings, redis_url: str, processes: int, host: str, port: int) -> None:
    """Run ``processes`` API processes on ``host:port`` until SIGTERM or SIGINT."""
    import app.main  # noqa: F401
    from app.warm import warm_answers
    from tidemark.supervisor import stop_on_signals

    _check_free(host, port)
    warm_answers()  # the kernels every process answers with, loaded once, shared
    parent = os.getpid()
    stopping = stop_on_signals()
    start = lambda: _fork(lambda: _child(settings, redis_url, host, port, parent))  # noqa: E731
    children = {start(): 0.0 for _ in range(processes)}
    deaths: list[float] = []
    try:
        while not stopping.is_set():
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid, status = 0, 0
            if pid in children:
                children.pop(pid)
                now = time.monotonic()
                deaths = [t for t in deaths if now - t < 60] + [now]
                print(f"tidemark api: process {pid} ended ({_why(status)}); starting another",
                      file=sys.stderr, flush=True)
                if len(deaths) > 5 * processes:
                    raise SystemExit("tidemark api: the API processes keep failing; stopping")
                time.sleep(min(0.1 * 2 ** (len(deaths) - 1), 5.0))
                children[start()] = now
            time.sleep(0.1)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + _GRACE
        while children and time.monotonic() < deadline:
            for pid in list(children):
                try:
                    done, _ = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    done = pid
                if done:
                    children.pop(pid)
            time.sleep(0.05)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass


def _why(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
