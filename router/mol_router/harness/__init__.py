"""The code interpreter: ``python`` calls of the model run in sandbox sessions.

``tool`` is the pure part (the request, the offered function, the calls, the steps);
``sandbox`` the service's client; ``loop`` one request's session and steps, driven by
the hop loop (:mod:`mol_router.serving.relay`).
"""
