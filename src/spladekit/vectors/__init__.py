"""Encoded corpora: the ``Vectors`` artifact (``artifact``: CSR + ids + meta, single-file or sharded folders),
the sharded layout (``shards``: sidecars, checksums, manifest) and streaming, sharded, resumable corpus
encoding (``encoding``: ``--shard I/N``, torchrun ranks). May import: ``common``, ``data``, ``model``."""
