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
"""

from __future__ import annotations

from tidemark.wire import keys

__all__ = ["NEXT_GENERATION_LUA", "CURRENT_GENERATION_LUA", "lua"]

# Lua: sets the (declared) local `gen` to a new generation. Reads Redis' clock, which a
# script may since Redis 5 (effects are replicated, not the script).
NEXT_GENERATION_LUA = """
do
  local t = redis.call('TIME')
  local g = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local last = tonumber(redis.call('GET', '""" + keys.GENERATION_LAST + """') or '0')
  if g <= last then g = last + 1 end
  gen = string.format('%d', g)
  redis.call('SET', '""" + keys.GENERATION_LAST + """', gen)
end
"""

# Lua: local `gen` := the current generation of a declared stream (one is created for a
# stream declared before generations existed), or false when the stream is not declared.
# Placeholders: KEYS_GEN (generations hash), KEYS_STREAMS (declarations), ARGV_NAME.
CURRENT_GENERATION_LUA = """
local gen = redis.call('HGET', KEYS_GEN, ARGV_NAME)
if not gen and redis.call('HEXISTS', KEYS_STREAMS, ARGV_NAME) == 1 then
""" + NEXT_GENERATION_LUA + """
  redis.call('HSET', KEYS_GEN, ARGV_NAME, gen)
end
"""


def lua(snippet: str, **names: str) -> str:
    """``snippet`` with its placeholders (``KEYS_GEN``, ``ARGV_NAME``, ``KEYS_STREAMS``)
    replaced by the caller's KEYS/ARGV references."""
    for placeholder, ref in names.items():
        snippet = snippet.replace(placeholder, ref)
    return snippet
