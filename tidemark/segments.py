"""A shard summary's published form: content-addressed segments and a manifest.

A summary blob (``tidemark/summary.py``: header and meta, then one blob per part) is cut
at its part boundaries into segments, each stored once under the digest of its bytes in
the stream's segment hash (``keys.shard_segments``). The shard's status names them in
order (``status["segments"] = [[part, digest], ...]``, the head first as ``"_head"``):
their concatenation is the blob, byte for byte. A part a batch did not touch keeps its
bytes and so its digest, so a publish writes, and a reader fetches, only the segments
that changed (the publisher sends only digests the current manifest lacks; the reader
asks only for digests it does not hold).

Coherence: segments are immutable (a digest names one content), the manifest is written
last in the same script that stores the segments, after the version guard, and a segment
is removed only when no current manifest of the stream names it any more — in that same
script. The reader reads statuses and the segments it lacks in one script
(:data:`READ_LUA`), so every set it gets is one publish's complete set: never a torn mix.

A blob that is not a readable summary (a failed shard's empty blob, a corrupt one) is one
segment, ``"_whole"``: the reader's decode refuses it whole, as before.
"""

from __future__ import annotations

import hashlib
import json
import struct

from sketches.base import HEADER_SIZE

__all__ = ["split", "join", "digest", "PUBLISH_LUA", "READ_LUA"]

_META = struct.Struct("<I")
HEAD, WHOLE = "_head", "_whole"


def digest(data: bytes) -> str:
    """The name of a segment: a 128-bit BLAKE2b of its bytes (hex)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def split(blob: bytes) -> list[tuple[str, bytes]]:
    """``blob`` as ``[(part, bytes), ...]`` in order (module notes); joining them gives it
    back exactly."""
    try:
        (n,) = _META.unpack_from(blob, HEADER_SIZE)
        head_end = HEADER_SIZE + _META.size + n
        meta = json.loads(bytes(blob[HEADER_SIZE + _META.size : head_end]))
        layout = [(str(name), int(length)) for name, length in meta["parts"]]
    except (struct.error, ValueError, KeyError, TypeError):
        return [(WHOLE, bytes(blob))]
    if head_end + sum(length for _, length in layout) != len(blob) or any(l < 0 for _, l in layout):
        return [(WHOLE, bytes(blob))]
    out, offset = [(HEAD, bytes(blob[:head_end]))], head_end
    for name, length in layout:
        out.append((name, bytes(blob[offset : offset + length])))
        offset += length
    return out


def join(manifest: list, segments: dict[str, bytes]) -> bytes:
    """The blob a manifest names, from ``segments`` (digest -> bytes); KeyError when one
    is missing (the reader always fetches a manifest's missing segments with it)."""
    return b"".join(segments[d] for _, d in manifest)


# Stores one shard's segments and its manifest-carrying status, guarded as before
# (``workers/publish.py``: only the stream's current generation, only a newer version),
# then removes the segments no current manifest of the stream names any more. Returns 1
# (published), 0 (refused by a guard) or -1 (a segment the publisher took for stored is
# not: it sends them all again). Nothing is written unless it publishes.
# KEYS: shard statuses hash, segments hash, declarations hash, generations hash, deleted hash
# ARGV: shard, version, status JSON, stream name, config JSON, announce channel,
#       generation, then digest, bytes, digest, bytes, ... (the segments sent)
PUBLISH_LUA = """
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
redis.call('PUBLISH', ARGV[6], cjson.encode({stream=ARGV[4], shard=tonumber(ARGV[1]), version=tonumber(ARGV[2])}))
return 1
"""

# One coherent read: the shard statuses, the ingest counters, the current generation and
# every segment the current generation's manifests name that the reader does not hold.
# KEYS: shard statuses hash, segments hash, ingest stats hash, generations hash
# ARGV: stream name, then the digests the reader holds
# Returns {statuses (flat), ingest stats (flat), generation or false, {digest, bytes, ...}}
READ_LUA = """
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
