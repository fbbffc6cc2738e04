"""Ground floor: the records every role hands the next, and the interfaces they meet at.

Standard library only (an import contract in the tests holds it so): genome, problem and the
op registry, records, the artifact and bundle formats, errors, the search-space interface and
the space registry. Nothing here imports another floor.
"""
