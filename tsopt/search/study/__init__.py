"""The roles of one tuning run, which :class:`tsopt.search.driver.Driver` turns in its loop.

``opening`` (set-up) and ``machine`` (this machine's GPUs, the device profile), ``workers``
(the pools), ``budgets`` (when asking stops), ``claims`` (asking, resuming, the candidates of
other processes' runs), ``building`` and ``measuring`` (the two stages a candidate passes,
with contender re-checks and the final confirmation), ``bundling`` (what nothing measures
here), ``jobs`` (the run's candidates and the one teller). Each is handed what it works
with; none imports the driver.
"""
