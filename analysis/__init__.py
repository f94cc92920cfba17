"""Python access to replayssm result files (see results.py)."""
from .results import open_summary, open_run, run_ids, provenance  # noqa: F401
