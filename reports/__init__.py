"""The study report (one self-contained HTML file) and the optuna-dashboard command.

``report`` (the command) -> ``data`` (everything the page shows, read through
the Store) -> ``render`` (template + CSS + script + data inlined into one
file); ``importance`` and ``schedule`` compute two of its parts; ``assets/``
holds the template, style and the hand-written SVG plotting script.
"""
