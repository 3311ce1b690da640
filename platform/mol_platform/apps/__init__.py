"""The platform's own programs: the ``mol`` CLI shell, ``mol up``, adapter pulls, the
vLLM resolver plugin, the engine launcher and the demo builder.

The top floor: apps import clients and the contract, never the reverse.
"""
