"""The document stream, the shared buffer core and the four packers (SPEC.md "Packing")."""
