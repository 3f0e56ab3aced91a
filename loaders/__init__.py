"""The document stream, the shared buffer core and the four packers (docs/baseline.md, "Packing: the four loaders")."""
