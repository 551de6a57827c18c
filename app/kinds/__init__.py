"""Query kinds beyond window counts; importing this package registers them in ``answers``."""

from app.kinds import decayed, keyed, values  # noqa: F401
