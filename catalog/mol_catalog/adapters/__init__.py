"""adapters: endpoints, service, publish (the pipeline), schemas, uploads, repository (reads),
writes, name_sample (picks how a search starts)."""
