"""The training core's parts: model, optimizer, config, checkpoints (train.py drives them)."""
