"""SHA256 manifests of code, data and checkpoints (sha256sum format), and their verifier.

    __main__.py  python -m manifests write | verify
"""
