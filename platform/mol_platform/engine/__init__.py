"""Running vLLM for MoL: the launcher (runs inside the engine venv) and the engine-args
builder (spec -> vLLM flags and env).

This package's ``__init__`` imports nothing: the launcher runs where only the standard
library and vLLM are installed.
"""
