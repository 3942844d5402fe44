"""The pure domain, in layers: capacity over decisions over requests over policy over the model.

Nothing in this package performs I/O or imports a Google client, except that
:mod:`shared.domain.request.canonical` reads a body with the Vertex v1 protos, as Vertex does
(the import contract in pyproject.toml names that one exception).
"""
