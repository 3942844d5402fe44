"""Adapters: the ports implemented on Google Cloud services (Firestore, Pub/Sub, Vertex, GCS)."""
