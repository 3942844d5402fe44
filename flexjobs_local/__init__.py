"""The embedded stack and the Vertex AI simulator. Production code never imports this package."""
