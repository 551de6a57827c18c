"""The ``tidemark`` command (contract §2): the entry points that wire the services together
(``main``, ``serve``) and what only the command runs: ``up``'s terminal (``console``) and
spare worker (``standby``), ``demo``'s live streams (``demo``), and the API clients of
``ingest`` and ``streams`` (``ingest_client``, ``streams_client``).

It stands above everything else (``app``, ``workers``, the core package ``tidemark``), so
the core imports nothing above it."""
