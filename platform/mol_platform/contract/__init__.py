"""The shared contract: models and pure checks every component agrees on.

The MoLDeployment spec, adapter references, the catalog's wire models, the router's
config, the PEFT/safetensors readers, the compatibility checker and the engine-args
builder. No I/O clients and no applications live here (import-linter's platform
layers contract): anything may import the contract, the contract imports nothing
above it.
"""
