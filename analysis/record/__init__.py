"""Record SSM decode traces (format v1) from transformers models: Mamba-2, Nemotron-H, Qwen3-Next (GDN).

torch and transformers are optional dependencies, imported only when recording; `trace_writer` needs numpy and h5py
alone. Command line: `python3 -m analysis.record --help`; documentation: docs/recording.md.
"""
from .trace_writer import bf16_bits, bf16_to_f32, read_inputs, write_trace  # noqa: F401


def Recorder(*args, **kwargs):  # noqa: N802 - lazy import of the torch-side class
    from .capture import Recorder as _R
    return _R(*args, **kwargs)
