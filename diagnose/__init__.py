"""swiftdoc: reads what ms-swift prints about a fine-tuning run and diagnoses it.

The package is laid out along the pipeline: `parse` (logs -> Run), `features`
(Run -> named values), `engine`/`rules` (features -> findings), `diagnosis`
(findings -> verdict), `patch` (verdict -> flag diff), `verify` and `attach`.
Importing this package imports nothing heavy (no torch, swift, pynvml, pandas).
"""
__version__ = "0.1.0"
