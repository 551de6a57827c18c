"""Which of Spark's three Python stateful APIs costs least per group, on the worker's load.

Issue #22, item 2: with a thousand small groups per batch the per-group call itself counts.
PySpark offers three ways to keep a (stream, shard) summary in the state store:

* ``applyInPandasWithState`` (what ``workers/job.py`` uses): a pandas frame per group, the
  state passed in and out with the group's Arrow batch;
* ``transformWithStateInPandas``: a pandas frame per group, the state read and written
  through a ``ValueState`` (calls from the Python worker to a state server in the JVM);
* ``transformWithState`` (row-based, PySpark 4.1+): ``Row`` objects per group, the same
  ``ValueState``.

One ``local[2]`` session built by the worker's own ``build_spark`` (RocksDB state store,
changelog checkpointing, Arrow, worker reuse; 2 state partitions, the default), fed by a file
source that reads one pre-written Parquet file per micro-batch, so every batch has the same
shape: ``GROUPSxROWS`` rows per batch, grouped by ``stream, shard`` as the worker groups. A row
here is one event; the worker's rows are ingest chunks (one per request, 100-500 events), so
its many-stream load is ``1000x1`` (1,000 streams posting 100 events each per 1 s batch) and
``1000x100``/``1x100000`` show what rows per group cost (default: ``update`` on 1000x1,
1000x100, 1x100000, ``trivial`` on 1000x1 and 1000x100).

The stateful function (same body behind each API):

* ``update`` — a stand-in of realistic state size and Python shape: the state is a bytes
  blob of ``--state-kb`` (50 KB) plus version and event count; each call decodes the blob
  (``np.frombuffer`` + copy), adds the group's values into its buckets (NumPy, one
  ``bincount``), encodes it (``tobytes``) and writes it back, and emits one row per group
  as the worker does. It leaves out Tidemark's sketch work (``workers/update.py``
  ``update_shard`` costs ~6 ms per shard of 100 events here, ~2.5 ms with the decoded
  summary kept), which is the same under every API: what differs between the APIs is the
  rest, and that is what this measures.
* ``trivial`` — counts the rows and keeps a one-number state: the batch time is then the
  API's own cost (per group, per row, per batch).
* ``real`` (opt-in, slow) — ``update_shard`` itself on the group's events (encoded as one
  ingest chunk), the state the real summary blob.

**Time segments** (issue #33, item 2: "measure the state APIs again on this shape before
choosing"): with ``--segments N`` a group's state is split into ``N`` time segments of
``state-kb / N`` each, and every measured batch touches only the newest (an in-order stream
whose window is full: the first ``N`` batches each start one segment, then the warm-up
and measured batches all land in the last). Two more layouts take it, beside the
whole-blob APIs above (which keep the same ``state-kb`` as one value):

* ``pandas_with_state_segment``: ``applyInPandasWithState`` grouped by (stream, shard,
  segment), a state row per segment;
* ``tws_rows_map``: row-based ``transformWithState`` grouped by (stream, shard), the
  segments in a ``MapState`` keyed by segment, only the touched one read and written.

For each (API, function, shape): a fresh checkpoint, ``--warmup`` batches, then ``--batches``
measured ones. Reported: batch ``durationMs.triggerExecution`` p50/p95, the state operator's
commit time, CPU seconds per batch of the JVM (driver and executor threads: ``local`` mode
runs both in one process) and of the Python workers (the JVM's child processes), and the
state-store bytes written per batch (files the batches added under the checkpoint's
``state/`` directory). The runs interleave the APIs (rotated order) and repeat ``--repeats``
times, since the machine is shared: compare the ratios of the same repeat, and trust CPU
seconds over wall time when the load average is above the core count. About 5 min with
``--repeats 1`` on an idle ``local[2]``; twice that with the default 2 repeats.

    python bench/bench_state_api.py [--batches 8] [--warmup 2] [--repeats 2]
        [--shapes 1000x1,1000x100,1x100000] [--trivial-shapes 1000x1,1000x100]
        [--apis pandas_with_state,tws_pandas,tws_rows] [--state-kb 50] [--json out.json]
        [--segments 16 --apis pandas_with_state,pandas_with_state_segment,tws_rows,tws_rows_map]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(os.environ.get("TIDEMARK_BENCH_TREE") or Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))

APIS = ("pandas_with_state", "tws_pandas", "tws_rows")
SEGMENTED = ("pandas_with_state_segment", "tws_rows_map")  # a state value per time segment
OUTPUT_SCHEMA = "stream string, shard int, version long, events long"
INPUT_SCHEMA = "stream string, shard int, segment long, ts double, key string, value double"
STATE_SCHEMA = "blob binary, events long, version long"
BUCKETS_PER_KB = 128  # float64 buckets: 1 KB of state per 128


# ---- the stateful function, the same body behind every API ---------------------------------

def _step(fn: str, state: tuple | None, ts, keys, values, buckets: int, real: dict | None):
    """One group's new state ``(blob, events, version)`` from its previous state and its
    rows' columns (NumPy arrays; ``keys`` a list of str)."""
    import numpy as np

    blob, events, version = state if state is not None else (None, 0, 0)
    n = len(values)
    if fn == "trivial":
        return (None, events + n, version + 1)
    if fn == "real":
        from tidemark.chunks import encode_chunk
        from workers.update import Chunk, update_shard

        chunk = encode_chunk(ts, list(keys), values, np.ones(n))
        result = update_shard(blob, real["config"], real["secret"], [Chunk(chunk, float("-inf"))])
        return (result.blob, events + result.events, version + 1)
    # update: decode, add the values into their buckets, encode (a ~state-kb blob)
    if blob is not None:
        counts = np.frombuffer(blob, dtype=np.float64).copy()
    else:  # half noise, half zeros: compresses ~2x, as a real summary blob does (zlib)
        counts = np.zeros(buckets, dtype=np.float64)
        counts[: buckets // 2] = np.random.default_rng(n).random(buckets // 2)
    idx = (np.abs(values) * 97.0).astype(np.int64) % buckets
    counts += np.bincount(idx, minlength=buckets)
    return (counts.tobytes(), events + n, version + 1)


def _real_context(fn: str) -> dict | None:
    if fn != "real":
        return None
    from tidemark.hash_secret import HashSecret
    from tidemark.streams import StreamConfig

    return {"config": StreamConfig(max_window="1h"), "secret": HashSecret(b"tidemark-bench-state-api")}


def pandas_with_state_fn(fn: str, buckets: int):
    """``applyInPandasWithState``: the worker's present shape (``shard_updater``)."""

    def update(key, pdfs, group_state):
        import pandas as pd

        real = _real_context(fn)
        rows = pd.concat(list(pdfs), ignore_index=True)
        previous = tuple(group_state.get) if group_state.exists else None
        state = _step(fn, previous, rows["ts"].to_numpy(), rows["key"].tolist(),
                      rows["value"].to_numpy(), buckets, real)
        group_state.update(state)
        yield pd.DataFrame({"stream": [key[0]], "shard": [int(key[1])], "version": [state[2]],
                            "events": [state[1]]})

    return update


def tws_map_processor(fn: str, buckets: int):
    """Row-based ``transformWithState`` keyed by (stream, shard), the time segments in a
    ``MapState``: only the segments a batch's rows fall in are read and written."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    segment_key = StructType([StructField("segment", LongType(), False)])
    state_type = StructType([StructField("blob", BinaryType(), True),
                             StructField("events", LongType(), True),
                             StructField("version", LongType(), True)])

    class SegmentedShard(StatefulProcessor):
        def init(self, handle):
            self.segments = handle.getMapState("segments", segment_key, state_type)
            self.real = _real_context(fn)

        def handleInputRows(self, key, rows, timerValues=None):
            import numpy as np
            from pyspark.sql import Row

            by_segment: dict[int, tuple[list, list, list]] = {}
            for row in rows:
                cols = by_segment.setdefault(int(row.segment), ([], [], []))
                cols[0].append(row.ts)
                cols[1].append(row.key)
                cols[2].append(row.value)
            version = events = 0
            for segment, (ts, keys, values) in by_segment.items():
                previous = self.segments.getValue((segment,))
                state = _step(fn, None if previous is None else tuple(previous),
                              np.asarray(ts, dtype=np.float64), keys,
                              np.asarray(values, dtype=np.float64), buckets, self.real)
                self.segments.updateValue((segment,), state)
                version, events = max(version, state[2]), events + state[1]
            yield Row(stream=key[0], shard=int(key[1]), version=version, events=events)

        def close(self):
            pass

    return SegmentedShard()


def tws_processor(fn: str, buckets: int, rows_api: bool):
    """A ``StatefulProcessor`` for ``transformWithStateInPandas`` (``rows_api`` False: pandas
    frames in and out) or row-based ``transformWithState`` (``Row`` in and out)."""
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    state_type = StructType([StructField("blob", BinaryType(), True),
                             StructField("events", LongType(), True),
                             StructField("version", LongType(), True)])

    class ShardProcessor(StatefulProcessor):
        def init(self, handle):
            self.summary = handle.getValueState("summary", state_type)
            self.real = _real_context(fn)

        def handleInputRows(self, key, rows, timerValues=None):
            import numpy as np

            previous = tuple(self.summary.get()) if self.summary.exists() else None
            if rows_api:
                from pyspark.sql import Row

                ts, keys, values = [], [], []
                for row in rows:
                    ts.append(row.ts)
                    keys.append(row.key)
                    values.append(row.value)
                state = _step(fn, previous, np.asarray(ts, dtype=np.float64), keys,
                              np.asarray(values, dtype=np.float64), buckets, self.real)
                self.summary.update(state)
                yield Row(stream=key[0], shard=int(key[1]), version=state[2], events=state[1])
            else:
                import pandas as pd

                frame = pd.concat(list(rows), ignore_index=True)
                state = _step(fn, previous, frame["ts"].to_numpy(), frame["key"].tolist(),
                              frame["value"].to_numpy(), buckets, self.real)
                self.summary.update(state)
                yield pd.DataFrame({"stream": [key[0]], "shard": [int(key[1])],
                                    "version": [state[2]], "events": [state[1]]})

        def close(self):
            pass

    return ShardProcessor()


def stateful(df, api: str, fn: str, buckets: int, segments: int = 1):
    """The stateful query of ``api``; a segmented layout keeps ``buckets / segments`` per
    segment value (the same state in all)."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    if api == "pandas_with_state_segment":
        # the worker's function, keyed by segment too: a state row per time segment
        return df.groupBy("stream", "shard", "segment").applyInPandasWithState(
            pandas_with_state_fn(fn, buckets // segments), OUTPUT_SCHEMA, STATE_SCHEMA,
            "Update", GroupStateTimeout.NoTimeout)
    if api == "tws_rows_map":
        return df.groupBy("stream", "shard").transformWithState(
            tws_map_processor(fn, buckets // segments), OUTPUT_SCHEMA, "Update", "None")
    grouped = df.groupBy("stream", "shard")
    if api == "pandas_with_state":
        return grouped.applyInPandasWithState(pandas_with_state_fn(fn, buckets), OUTPUT_SCHEMA,
                                              STATE_SCHEMA, "Update", GroupStateTimeout.NoTimeout)
    if api == "tws_pandas":
        return grouped.transformWithStateInPandas(tws_processor(fn, buckets, False), OUTPUT_SCHEMA,
                                                  "Update", "None")
    if api == "tws_rows":
        return grouped.transformWithState(tws_processor(fn, buckets, True), OUTPUT_SCHEMA,
                                          "Update", "None")
    raise ValueError(api)


# ---- input: one Parquet file per micro-batch ------------------------------------------------

def write_batches(directory: Path, groups: int, rows: int, files: int, seed: int = 22,
                  segments: int = 1) -> None:
    """``files`` Parquet files of ``groups`` (stream, shard) groups × ``rows`` events each;
    file ``f``'s events fall in time segment ``min(f, segments − 1)`` (the first files
    start the segments of a full window, the rest land in the newest)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True)
    names = np.array([f"stream-{g:05d}" for g in range(groups)], dtype=object)
    key_names = np.array([f"k{i}" for i in range(500)], dtype=object)
    for f in range(files):
        n = groups * rows
        group = np.repeat(np.arange(groups), rows)
        table = pa.table({
            "stream": pa.array(names[group], pa.string()),
            "shard": pa.array(np.zeros(n, dtype=np.int32)),
            "segment": pa.array(np.full(n, min(f, segments - 1), dtype=np.int64)),
            "ts": pa.array(1.7e9 + f + np.tile(np.sort(rng.random(rows)), groups)),
            "key": pa.array(key_names[rng.integers(0, 500, n)], pa.string()),
            "value": pa.array(rng.lognormal(3.0, 1.0, n)),
        })
        pq.write_table(table, directory / f"batch-{f:04d}.parquet")


# ---- process CPU from /proc ---------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, list[str]] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # fields from the 3rd (state) on
    return int(fields[1]), fields  # parent pid


def cpu_sample(jvm: int) -> dict:
    """CPU seconds (user + system) of the JVM and of each of its descendant processes (the
    Python workers), each process's own only. Children's reaped times are left out: a
    ``pyspark.daemon`` that Spark stops leaves its forked workers unreaped, so reaped sums
    lose seconds and differences of them go wrong (even negative)."""
    stats = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            s = _stat(int(entry))
            if s is not None:
                stats[int(entry)] = s
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)

    def own(pid):  # utime and stime: fields 14 and 15 of /proc/PID/stat (11, 12 here)
        f = stats[pid][1]
        return (int(f[11]) + int(f[12])) / _TICK

    python, todo = {}, list(children.get(jvm, []))
    while todo:
        pid = todo.pop()
        python[pid] = own(pid)
        todo.extend(children.get(pid, []))
    return {"jvm": own(jvm) if jvm in stats else 0.0, "python": python}


def cpu_between(start: dict, end: dict) -> tuple[float, float]:
    """``(JVM, Python workers)`` CPU seconds spent between two samples: for each process
    alive at the end, what it spent since the start (all of it when it started since). A
    worker that ended in between is missed; with ``spark.python.worker.reuse`` (the
    worker's setting) the executors' workers live through the measured batches."""
    python = sum(cpu - start["python"].get(pid, 0.0) for pid, cpu in end["python"].items())
    return end["jvm"] - start["jvm"], python


def files_under(path: Path) -> dict[str, int]:
    out = {}
    for dirpath, _, names in os.walk(path):
        for name in names:
            p = os.path.join(dirpath, name)
            try:
                out[p] = os.path.getsize(p)
            except OSError:
                pass
    return out


# ---- one measured query ---------------------------------------------------------------------

class Progress:
    """Snapshots CPU and the state directory when each batch's progress arrives."""

    def __init__(self, jvm: int):
        self.jvm, self.by_query, self.lock = jvm, {}, threading.Lock()
        self.snap_at: dict[str, tuple[int, Path]] = {}  # query id -> (batch id, state dir)

    def listener(self):
        from pyspark.sql.streaming import StreamingQueryListener

        outer = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = event.progress
                qid = str(p.id)
                with outer.lock:
                    at = outer.snap_at.get(qid)
                    if at is not None and p.batchId == at[0]:
                        outer.by_query[qid] = (time.monotonic(), cpu_sample(outer.jvm),
                                               files_under(at[1]))

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        return Listener()


def run_one(spark, progress: Progress, source: Path, work: Path, api: str, fn: str,
            buckets: int, warmup: int, batches: int, segments: int = 1) -> dict:
    checkpoint = work / f"ck-{api}-{fn}-{time.monotonic_ns()}"
    df = (spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1)
          .parquet(str(source)))
    writer = (stateful(df, api, fn, buckets, segments).writeStream.outputMode("update").format("noop")
              .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    state_dir = checkpoint / "state"
    query = writer.start()
    qid = str(query.id)
    with progress.lock:
        progress.snap_at[qid] = (warmup - 1, state_dir)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"{api}/{fn}: {query.exception()}")
    end_cpu, end_files = cpu_sample(progress.jvm), files_under(state_dir)
    deadline = time.monotonic() + 10
    while qid not in progress.by_query and time.monotonic() < deadline:
        time.sleep(0.05)  # the listener's event bus runs behind
    _, start_cpu, start_files = progress.by_query.pop(qid)
    runs = [p for p in query.recentProgress if p["batchId"] >= warmup and p["numInputRows"] > 0]
    if len(runs) != batches:
        raise RuntimeError(f"{api}/{fn}: {len(runs)} measured batches, expected {batches}")
    ms = sorted(p["durationMs"]["triggerExecution"] for p in runs)
    ops = [p["stateOperators"][0] for p in runs]
    written = sum(size for path, size in end_files.items()
                  if size != start_files.get(path))  # files the measured batches added or grew
    shutil.rmtree(checkpoint, ignore_errors=True)
    return {
        "p50_ms": statistics.median(ms),
        "p95_ms": ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))],
        "commit_ms": statistics.median(o.get("commitTimeMs", 0) for o in ops),
        "rows_updated": statistics.median(o.get("numRowsUpdated", 0) for o in ops),
        "jvm_cpu_s": cpu_between(start_cpu, end_cpu)[0] / batches,
        "python_cpu_s": cpu_between(start_cpu, end_cpu)[1] / batches,
        "state_bytes": written / batches,
        "state_rows": ops[-1].get("numRowsTotal", 0),
    }


def shape_of(text: str) -> tuple[int, int]:
    g, r = text.lower().split("x")
    return int(g), int(r)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--shapes", default="1000x1,1000x100,1x100000")
    ap.add_argument("--trivial-shapes", default="1000x1,1000x100")
    ap.add_argument("--real-shapes", default="", help="shapes to run Tidemark's update_shard on (slow)")
    ap.add_argument("--apis", default=",".join(APIS))
    ap.add_argument("--state-kb", type=int, default=50)
    ap.add_argument("--segments", type=int, default=1,
                    help="time segments per group's state (the first of them start in warm-up)")
    ap.add_argument("--partitions", type=int, default=2, help="state partitions (the default's 2)")
    ap.add_argument("--json", help="write every run's figures here")
    args = ap.parse_args(argv)
    apis = [a for a in args.apis.split(",") if a]
    plan = ([(s, "update") for s in args.shapes.split(",") if s]
            + [(s, "trivial") for s in args.trivial_shapes.split(",") if s]
            + [(s, "real") for s in args.real_shapes.split(",") if s])
    buckets = args.state_kb * BUCKETS_PER_KB
    if any(a in SEGMENTED for a in apis) and args.segments < 2:
        ap.error("the segmented layouts need --segments 2 or more")
    warmup = max(args.warmup, args.segments + 1)  # every segment started before measuring

    from workers.job import build_spark

    work = Path(tempfile.mkdtemp(prefix="tm-bench-state-api-"))
    try:
        files = warmup + args.batches
        sources = {}
        for shape in dict.fromkeys(s for s, _ in plan):
            sources[shape] = work / f"in-{shape}"
            write_batches(sources[shape], *shape_of(shape), files, segments=args.segments)
        t0 = time.monotonic()
        spark = build_spark("local[2]", args.partitions, app_name="tidemark-bench-state-api")
        spark.sparkContext.setLogLevel("WARN")
        jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        progress = Progress(jvm)
        spark.streams.addListener(progress.listener())
        print(f"# Spark {spark.version}, local[2], {args.partitions} state partitions, "
              f"session in {time.monotonic() - t0:.1f} s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
        results = []
        for repeat in range(args.repeats):
            for i, (shape, fn) in enumerate(plan):
                order = apis[(i + repeat) % len(apis):] + apis[:(i + repeat) % len(apis)]
                for api in order:
                    load = os.getloadavg()[0]
                    r = run_one(spark, progress, sources[shape], work, api, fn, buckets,
                                warmup, args.batches, args.segments)
                    r.update(repeat=repeat + 1, shape=shape, fn=fn, api=api, load=load)
                    results.append(r)
                    print(f"repeat {repeat + 1} {shape:>9} {fn:7} {api:17} p50 {r['p50_ms']:6.0f} "
                          f"p95 {r['p95_ms']:6.0f} ms  commit {r['commit_ms']:4.0f} ms  cpu jvm "
                          f"{r['jvm_cpu_s']:.3f} py {r['python_cpu_s']:.3f} s/batch  state "
                          f"{r['state_bytes'] / 1e6:6.2f} MB/batch  load {load:.2f}", flush=True)
        print(f"# total {time.monotonic() - t0:.0f} s; load average "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(summary_table(results, apis))
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1))
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def _cpu(r: dict) -> float:
    return r["jvm_cpu_s"] + r["python_cpu_s"]


def summary_table(results: list[dict], apis: list[str]) -> str:
    """Markdown: each (shape, function, API) with its repeats side by side, and the batch
    p50 relative to ``applyInPandasWithState`` of the same repeat."""
    lines = ["| shape (groups×rows) | function | API | batch p50 / p95 ms | × pandas_with_state p50 "
             "| commit ms | JVM CPU s/batch | Python CPU s/batch | × pandas_with_state CPU "
             "| state MB/batch |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    keys = list(dict.fromkeys((r["shape"], r["fn"]) for r in results))
    for shape, fn in keys:
        for api in apis:
            runs = [r for r in results if (r["shape"], r["fn"], r["api"]) == (shape, fn, api)]
            base = {r["repeat"]: r["p50_ms"] for r in results
                    if (r["shape"], r["fn"], r["api"]) == (shape, fn, "pandas_with_state")}
            base_cpu = {r["repeat"]: _cpu(r) for r in results
                        if (r["shape"], r["fn"], r["api"]) == (shape, fn, "pandas_with_state")}

            def each(f, key):
                return " · ".join(f.format(r[key]) for r in runs)

            ratio = " · ".join(f"{r['p50_ms'] / base[r['repeat']]:.2f}" if base.get(r["repeat"]) else "–"
                               for r in runs)
            lines.append(
                f"| {shape} | {fn} | {api} | "
                + " · ".join(f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f}" for r in runs)
                + f" | {ratio} | {each('{:.0f}', 'commit_ms')} | {each('{:.2f}', 'jvm_cpu_s')} | "
                f"{each('{:.2f}', 'python_cpu_s')} | "
                + " · ".join(f"{_cpu(r) / base_cpu[r['repeat']]:.2f}" if base_cpu.get(r["repeat"]) else "–"
                             for r in runs) + " | "
                + " · ".join(f"{r['state_bytes'] / 1e6:.2f}" for r in runs) + " |")
    overhead = []
    for r in results:
        groups = shape_of(r["shape"])[0]
        if r["fn"] == "trivial" and groups >= 100:
            overhead.append(f"| {r['shape']} | {r['api']} | {r['repeat']} | {r['p50_ms'] / groups * 1e3:.0f} "
                            f"| {_cpu(r) / groups * 1e6:.0f} | {r['python_cpu_s'] / groups * 1e6:.0f} |")
    if overhead:
        lines += ["", "Per-group cost of the API alone (trivial function), µs per group:", "",
                  "| shape | API | repeat | batch p50 ÷ groups | CPU ÷ groups | Python CPU ÷ groups |",
                  "|---|---|---|---|---|---|"] + sorted(overhead)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
