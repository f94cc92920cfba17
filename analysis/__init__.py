"""Python access to replayssm result files: `from analysis.results import open_summary, open_run`."""
