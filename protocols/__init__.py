"""The comparison protocol's data: the six training configs (configs/, written from presets/six.py by
generate_configs.py) and the frozen protocol file with the checks that enforce it (protocol.py).
What runs the comparison (train, freeze, figures) is comparison/, above eval/ and train.py."""
