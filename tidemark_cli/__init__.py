"""The ``tidemark`` command (contract §2): the entry points that wire the services together.

It stands above everything else (``app``, ``workers``, the core package ``tidemark``), so
the core imports nothing above it."""
