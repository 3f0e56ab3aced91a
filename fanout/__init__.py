"""One room for the work that fans out: the queue study's runs, the six training configs, the audit's
worker streams and permutations. Callers build Tasks and hand them to an engine; results come back in task order to
the caller (the driver), which writes its own files. A large argument that many tasks read goes through
engine.share() (on Ray one copy in the object store, for a local pool one file). Nothing outside this package imports Ray.

    task.py        Task: one picklable call, the CPUs and GPUs it asks for, the paths it reads and writes
    engine.py      Engine: the protocol every engine implements (in_process, share, run, close)
    local.py       the local engine: in this process, or a pool of N spawned processes (the default)
    probe.py       what every node must see as the driver does (checkout, corpus, --out), checked before a Ray run
    ray_connect.py joining a Ray cluster (its address, token and port checked first) or starting a local Ray
    ray_engine.py  the Ray engine: the nodes probed, small tasks batched, a lost cluster in one line
    choose.py      the --engine / --ray-address flags, check_engine() and open_engine(), which the command lines share
    corpus_data.py the corpus length pass (corpus/readers) on an engine: local processes, or Ray Data
"""
from fanout.choose import ENGINES, add_engine_args, check_engine, open_engine
from fanout.engine import Engine
from fanout.task import Task, TaskFailed, gpus_for

__all__ = ["ENGINES", "Engine", "Task", "TaskFailed", "add_engine_args", "check_engine", "gpus_for", "open_engine"]
