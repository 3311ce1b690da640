"""Clients of the platform's peers: the catalog (sync and async) and the Kubernetes API.

Built on the contract only; applications (the CLI, ``mol up``, the vLLM plugin) and
the components use them. No client imports an application.
"""
