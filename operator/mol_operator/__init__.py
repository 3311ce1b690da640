"""The MoLDeployment operator (kopf)."""
