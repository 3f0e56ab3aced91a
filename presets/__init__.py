"""Settings shared across the house, typed and defined once (the ground floor: imports only errors/).

    typed.py    dataclasses built from key: value mappings; an unknown key or a bad value is named in one line
    shapes.py   the model shapes (the paper's, tiny, the queue demo's, the GPU check's, the 64M proxy)
    six.py      the paper's conditions and their packers, the seeds, the tiny regime, the six runs' presets

training/config.py, the six-config generator, the audit, the findings page, the queue's settings and
the queue study's presets all take these from here.
"""
