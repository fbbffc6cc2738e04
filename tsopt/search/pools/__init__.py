"""Where candidates are verified, built and measured: one module per kind of pool, each
implementing :mod:`tsopt.search.pools.protocol`."""
