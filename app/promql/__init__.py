"""PromQL as Tidemark reads it (contract §10): ``parser`` (syntax), ``query`` (what a
selector asks), ``regex`` (``stream=~`` in linear time), ``times`` (Prometheus' times and
durations) and ``evaluate`` (answers at instants, through :mod:`app.answers`)."""
