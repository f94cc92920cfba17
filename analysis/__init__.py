"""Python side of replayssm (issue 13): result files into xarray/pandas (`analysis.results`), benchmark JSON
(`analysis.bench`), the published numbers (`analysis.published`, data in published.json), one plotting function per
figure (`analysis.figures`), the notebooks' context (`analysis.notebook`), and the reproduction
(`python3 -m analysis.reproduce`, i.e. scripts/reproduce.sh). `analysis.record` records traces from transformers
models (torch needed there only). Modules import lazily: `from analysis.results import open_summary` needs
numpy, h5py, xarray and pandas, not matplotlib."""
