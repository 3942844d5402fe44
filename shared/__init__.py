"""flexjobs: the library every Cloud Function shares (models, pure domain, ports, adapters)."""
