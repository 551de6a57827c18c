"""Every Lua script the API and the worker run on Redis: what each writes or reads of the
other's keys, in one place beside the key layout (``keys``) and the records (``records``).

Each script's KEYS and ARGV are listed above it; the ingest entry fields it writes are
those of ``records.LogEntry`` and ``records.Tombstone``, the status fields it reads those
of ``records.ShardStatus`` (``tests/tidemark/test_wire.py`` runs each one on a real Redis
and decodes what it wrote).

Tested by: tests/tidemark/test_wire.py (each Lua script on a real Redis).
"""

from __future__ import annotations

from tidemark.wire import keys

__all__ = ["NEXT_GENERATION", "CURRENT_GENERATION", "lua", "APPEND", "DECLARE", "DELETE",
           "PUBLISH", "READ", "ENSURE", "MOVE", "OLDEST", "SHARDS_MAX"]

# -- generations (``tidemark/generations.py``) ---------------------------------------------
# Lua: sets the (declared) local `gen` to a new generation. Reads Redis' clock, which a
# script may since Redis 5 (effects are replicated, not the script).
NEXT_GENERATION = """
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
CURRENT_GENERATION = """
local gen = redis.call('HGET', KEYS_GEN, ARGV_NAME)
if not gen and redis.call('HEXISTS', KEYS_STREAMS, ARGV_NAME) == 1 then
""" + NEXT_GENERATION + """
  redis.call('HSET', KEYS_GEN, ARGV_NAME, gen)
end
"""


def lua(snippet: str, **names: str) -> str:
    """``snippet`` with its placeholders (``KEYS_GEN``, ``ARGV_NAME``, ``KEYS_STREAMS``)
    replaced by the caller's KEYS/ARGV references."""
    for placeholder, ref in names.items():
        snippet = snippet.replace(placeholder, ref)
    return snippet


# -- the API: declare, append, delete (``app/store.py``) ----------------------------------
# Appends one ingest chunk atomically with everything the late rule and retries need, to
# the stream's log partition (``tidemark.ingest_log``), stamped with the stream's name and
# its generation (``tidemark.generations``); refused ('x') when the stream has none: it was
# deleted (or never declared) since the caller looked.
# KEYS: log partition, its stats hash, ingest stats hash, active set, idempotency key
#       ('' = none), generations hash, declarations hash
# ARGV: chunk ('' = no accepted event), accepted, rejected, largest ts of the chunk ('' = none),
#       receipt JSON, idempotency TTL seconds, stream name
APPEND = lua(CURRENT_GENERATION, KEYS_GEN="KEYS[6]", KEYS_STREAMS="KEYS[7]", ARGV_NAME="ARGV[7]") + """
if not gen then return 'x' end
if KEYS[5] ~= '' then
  local first = redis.call('GET', KEYS[5])
  if first then return '1' .. first end
end
local clock = redis.call('HGET', KEYS[3], 'clock')
-- First, so that a counter past 2^63 - 1 (tidemark/limits.py MAX_EVENTS) fails the script
-- before it has written anything.
redis.call('HINCRBY', KEYS[3], 'received', ARGV[2])
if ARGV[1] ~= '' then
  local id = redis.call('XADD', KEYS[1], '*', 'd', ARGV[1], 'n', ARGV[2], 'c', clock or '',
                        's', ARGV[7], 'g', gen)
  redis.call('HSET', KEYS[2], 'last', id)
  redis.call('HINCRBY', KEYS[2], 'events', ARGV[2])
  redis.call('HINCRBY', KEYS[2], 'chunks', 1)
  redis.call('ZADD', KEYS[4], tonumber(string.match(id, '^(%d+)')), ARGV[7])
end
if ARGV[4] ~= '' and (not clock or tonumber(ARGV[4]) > tonumber(clock)) then
  redis.call('HSET', KEYS[3], 'clock', ARGV[4])
end
redis.call('HINCRBY', KEYS[3], 'rejected', ARGV[3])
if KEYS[5] ~= '' then redis.call('SET', KEYS[5], ARGV[5], 'EX', ARGV[6]) end
return '0' .. ARGV[5]
"""

# Declares a stream: a new name gets its settings and a fresh generation (and any status a
# stale publish left is cleared); an existing one returns its settings for comparison.
# The largest shard count ever declared is kept too: back-pressure bounds the group updates
# a waiting stream can cost the worker by it.
# KEYS: declarations, generations, deleted, ingest stats, shard sketches, shard statuses,
#       largest shard count.  ARGV: name, settings JSON.  Returns {1 (new) | 0, settings JSON}.
DECLARE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if current then return {0, current} end
local gen
""" + NEXT_GENERATION + """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], gen)
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('DEL', KEYS[4], KEYS[5], KEYS[6])
local shards = tonumber(cjson.decode(ARGV[2])['shards']) or 1
if shards > (tonumber(redis.call('GET', KEYS[7])) or 0) then redis.call('SET', KEYS[7], shards) end
return {1, ARGV[2]}
"""

# Deletes a stream at once: its declaration, generation, counters and published shards go;
# the generation it ended is recorded (a late publish of it is refused) and a tombstone
# entry (``t``, ``g`` the generation it ended, ``s`` the stream, ``k`` its shard count) is
# appended to the stream's log partition, which the worker turns into the removal of every
# shard's state. Its pending entries stay in the shared partition, where the worker drops
# them by their generation; a per-stream queue of an earlier run not yet moved into the
# partitions (``workers.migrate``) goes, as its entries are of this generation or older.
# Returns -1 when the stream is not declared.
# KEYS: declarations, generations, deleted, log partition, its stats hash, ingest stats,
#       shard sketches, shard statuses, active set, legacy queue.  ARGV: name, announce channel.
DELETE = """
local decl = redis.call('HGET', KEYS[1], ARGV[1])
if not decl then return -1 end
local gen = redis.call('HGET', KEYS[2], ARGV[1]) or '0'
local shards = cjson.decode(decl)['shards'] or 1
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[3], ARGV[1], gen)
redis.call('DEL', KEYS[6], KEYS[7], KEYS[8], KEYS[10])
local id = redis.call('XADD', KEYS[4], '*', 't', '1', 'g', gen, 's', ARGV[1], 'k', shards)
redis.call('HSET', KEYS[5], 'last', id)
redis.call('HINCRBY', KEYS[5], 'chunks', 1)
redis.call('ZREM', KEYS[9], ARGV[1])
redis.call('PUBLISH', ARGV[2], cjson.encode({stream=ARGV[1], deleted=true}))
return shards
"""

# -- the worker publishes, the API reads (``tidemark/segments.py``, ``workers/publish.py``) -
# Stores one shard's segments and its manifest-carrying status, guarded
# (``workers/publish.py``: only the stream's current generation, only a newer version),
# then removes the segments no current manifest of the stream names any more. Returns 1
# (published), 0 (refused by a guard) or -1 (a segment the publisher took for stored is
# not: it sends them all again). Nothing is written unless it publishes.
# KEYS: shard statuses hash, segments hash, declarations hash, generations hash, deleted hash
# ARGV: shard, version, status JSON, stream name, config JSON, announce channel,
#       generation, then digest, bytes, digest, bytes, ... (the segments sent)
# The announcement names the generation as the string it was sent (cjson prints numbers
# to 14 digits; generations have 16) and the status's ``touched`` (a string already).
PUBLISH = """
local cur = redis.call('HGET', KEYS[4], ARGV[4])
if cur then
  if cur ~= ARGV[7] then return 0 end
else
  local dead = redis.call('HGET', KEYS[5], ARGV[4])
  if dead and tonumber(ARGV[7]) <= tonumber(dead) then return 0 end
end
local current = redis.call('HGET', KEYS[1], ARGV[1])
local old = nil
if current then
  old = cjson.decode(current)
  if old['generation'] == tonumber(ARGV[7]) and old['version'] >= tonumber(ARGV[2]) then return 0 end
end
local status = cjson.decode(ARGV[3])
local sent = {}
for i = 8, #ARGV, 2 do sent[ARGV[i]] = true end
-- A segment this shard's current manifest names is stored (only this script removes
-- segments, and never a named one), unless the stream's segments were lost whole (a key
-- deleted by hand): then every one is looked up. So a publish looks up only what it
-- neither sent nor had, not every segment of its summary.
if old and old['generation'] == tonumber(ARGV[7]) and redis.call('EXISTS', KEYS[2]) == 1 then
  for _, seg in ipairs(old['segments'] or {}) do sent[seg[2]] = true end
end
for _, seg in ipairs(status['segments'] or {}) do
  if not sent[seg[2]] and redis.call('HEXISTS', KEYS[2], seg[2]) == 0 then return -1 end
end
if not cur then
  redis.call('HSETNX', KEYS[3], ARGV[4], ARGV[5])
  redis.call('HSET', KEYS[4], ARGV[4], ARGV[7])
end
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
if old and old['segments'] then
  local named = {}
  for _, raw in ipairs(redis.call('HVALS', KEYS[1])) do
    for _, seg in ipairs(cjson.decode(raw)['segments'] or {}) do named[seg[2]] = true end
  end
  for _, seg in ipairs(old['segments']) do
    if not named[seg[2]] then redis.call('HDEL', KEYS[2], seg[2]) end
  end
end
redis.call('PUBLISH', ARGV[6], cjson.encode({stream=ARGV[4], shard=tonumber(ARGV[1]), version=tonumber(ARGV[2]),
                                             generation=ARGV[7], touched=status['touched']}))
return 1
"""

# One coherent read: the shard statuses, the ingest counters, the current generation and
# every segment the current generation's manifests name that the reader does not hold.
# KEYS: shard statuses hash, segments hash, ingest stats hash, generations hash
# ARGV: stream name, then the digests the reader holds
# Returns {statuses (flat), ingest stats (flat), generation or false, {digest, bytes, ...}}
READ = """
local statuses = redis.call('HGETALL', KEYS[1])
local gen = redis.call('HGET', KEYS[4], ARGV[1])
local held = {}
for i = 2, #ARGV do held[ARGV[i]] = true end
local segs = {}
if gen then
  local g = tonumber(gen)
  for i = 2, #statuses, 2 do
    local s = cjson.decode(statuses[i])
    if s['generation'] == g then
      for _, seg in ipairs(s['segments'] or {}) do
        local d = seg[2]
        if not held[d] then
          held[d] = true
          local bytes = redis.call('HGET', KEYS[2], d)
          if bytes then
            segs[#segs + 1] = d
            segs[#segs + 1] = bytes
          end
        end
      end
    end
  end
end
return {statuses, redis.call('HGETALL', KEYS[3]), gen, segs}
"""

# Publishes one shard only for the stream's current generation (``tidemark.generations``)
# and only when its version is newer than the one Redis holds of that generation, as its
# segments and a manifest written last (``PUBLISH`` below).
# A stream with no generation was deleted (the generation it ended is in the deleted hash:
# anything of it or older is refused) or lost in a Redis flush (the shard brings its
# declaration and generation back, as the republish after a flush needs).
# The current generation of a stream, declaring it with ARGV[2] if it is not (benches and
# tests that publish summaries without Spark). KEYS: declarations, generations.
ENSURE = """
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
""" + lua(CURRENT_GENERATION, KEYS_GEN="KEYS[2]", KEYS_STREAMS="KEYS[1]", ARGV_NAME="ARGV[1]") + """
return gen
"""

# -- the worker moves an earlier run's per-stream queues into the log (``workers/migrate.py``)
# KEYS: legacy queue, log partition, its stats; ARGV: entry id, events, then the new
# entry's fields and values
MOVE = """
if redis.call('XDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('HSET', KEYS[3], 'last', id)
redis.call('HINCRBY', KEYS[3], 'events', ARGV[2])
redis.call('HINCRBY', KEYS[3], 'chunks', 1)
return 1
"""

# The largest shard count declared, computed from every declaration when the key is
# missing (a Redis a Tidemark before it wrote to) and kept; DECLARE keeps it from then on.
# KEYS: declarations, largest shard count.  Returns it.
SHARDS_MAX = """
local kept = redis.call('GET', KEYS[2])
if kept then return tonumber(kept) end
local most = 1
for _, decl in ipairs(redis.call('HVALS', KEYS[1])) do
  local ok, config = pcall(cjson.decode, decl)
  local shards = ok and type(config) == 'table' and tonumber(config['shards']) or 1
  if shards > most then most = shards end
end
if redis.call('SET', KEYS[2], most, 'NX') then return most end
return tonumber(redis.call('GET', KEYS[2]))
"""

# -- back-pressure and readiness: the oldest entry not yet read (``app/backpressure.py``) ---
# KEYS: log partition; ARGV: '(' .. the last entry read. The id and stream of the oldest
# entry not yet read, without sending its chunk over the wire.
OLDEST = """
local e = redis.call('XRANGE', KEYS[1], ARGV[1], '+', 'COUNT', 1)
if not e[1] then return false end
local f = e[1][2]
for i = 1, #f, 2 do if f[i] == 's' then return {e[1][1], f[i + 1]} end end
return {e[1][1], ''}
"""
