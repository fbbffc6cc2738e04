"""Kernel templates and their knobs: one folder per space (``tsopt.search_spaces.<name>``).

Each folder reads the same way: ``kernel.py`` (the TS kernel, standalone: DSL only,
exported verbatim), ``config.py`` (genes to kernel configuration), ``space.py`` (the
:class:`~tsopt.core.space.SearchSpace`), ``checks.py`` (what TS does not model),
``funnel.py`` (the space's factorisation) and ``export.py`` (its ``kernel.py`` source).
Spaces are found through :mod:`tsopt.core.registry` and import nothing above the roles floor.
"""
