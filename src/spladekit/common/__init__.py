"""The bottom layer, imported by every stage and importing none of them: errors, atomic outputs, strict line
and JSON reading, local-or-remote sources, declared value ranges, devices, torchrun processes, sparse-row
operations and the package version. May import: nothing of spladekit outside ``common``."""
