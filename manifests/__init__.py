"""SHA256 manifests of code, data and checkpoints (sha256sum format), and their verifier."""
