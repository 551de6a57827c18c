"""Generations: every declaration of a stream name gets a fresh id, larger than any before.

A deleted stream's name may be declared again at once (contract §4), while chunks of the
old declaration may still wait in the ingest log, sit in a replayed micro-batch, or live
in Spark's state store of a worker killed before it saw the deletion. So nothing relies on
those being gone: every ingest entry, every shard state and every published shard carries
the generation it belongs to, and each layer keeps only the current one —

* the append script stamps each entry with the stream's current generation and refuses
  an append to a stream with none (deleted);
* the worker drops chunks older than its shard's generation, starts afresh on a newer one,
  removes a shard's state on the tombstone a DELETE appends, and creates state only for
  the generation that is current when it does;
* the publish script refuses a shard of any generation other than the current one, and
  the API reads the current generation in the same transaction as the shard statuses.

A generation is Redis' clock in microseconds, bumped past the last one handed out: it
grows even across a Redis flush (a counter would restart at 1 and could meet an old
generation still held in Spark's state store).

The Lua that hands out and looks up generations, and every script using it, is in
``tidemark.wire.scripts`` (``NEXT_GENERATION``, ``CURRENT_GENERATION``).

Tested by: tests/workers/test_generations.py, tests/tidemark/test_wire.py (the scripts that
compare generations).
"""
