"""Applications floor: what the command line runs (export, ingest, spaces) on the floors below."""
