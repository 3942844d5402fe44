"""The pure domain: request model and validation, job states, retry policy, failure classes.

Nothing in this package performs I/O or imports a Google client.
"""
