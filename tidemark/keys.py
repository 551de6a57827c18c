"""Moved to ``tidemark.wire.keys`` (the API/worker contract); this name stays only so that
branches written before the move still import. New code imports ``tidemark.wire.keys``."""

from tidemark.wire.keys import *  # noqa: F401,F403
from tidemark.wire.keys import PREFIX  # noqa: F401
