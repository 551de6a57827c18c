"""The contract between the API and the worker, which only meet in Redis.

* ``keys``: every Redis key (the API's, the worker's, the alerts');
* ``scripts``: every Lua script either side runs on those keys;
* ``records``: the ingest log entry and its tombstone, the shard status, the stream
  declaration's reader, each with one encode and one decode; entry ids in log order.

Nothing outside this package spells a key, an ingest entry's field or a shard status's
field (``tests/test_wire_seam.py`` greps for them); a round trip of each record and each
script runs without Spark (``tests/tidemark/test_wire.py``).
"""
