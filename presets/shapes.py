"""The model shapes, each defined once. TrainConfig's defaults are the paper's shape."""
from dataclasses import asdict, dataclass

from presets.typed import ConfigKeys


@dataclass(frozen=True)
class ModelShape(ConfigKeys):
    depth: int
    width: int
    heads: int
    kv_heads: int
    context: int
    short_window: int

    @property
    def row_capacity(self) -> int:
        """R: a row holds context + 1 tokens (context inputs, each with its next token as target)."""
        return self.context + 1

    def config_keys(self) -> dict:
        return asdict(self)


# the supplied baseline's model (docs/baseline.md, "Model"): 50.3 M parameters
PAPER = ModelShape(depth=8, width=512, heads=4, kv_heads=4, context=2048, short_window=1024)
# the six runs' tiny preset and the queue study's tiny and small presets (1.7 M parameters)
TINY = ModelShape(depth=2, width=64, heads=2, kv_heads=2, context=128, short_window=64)
# the main job's queue stage: smaller than tiny, so a 1,500-token shard is 12 updates of 2 rows
QUEUE_DEMO = ModelShape(depth=1, width=32, heads=2, kv_heads=2, context=64, short_window=32)
# the GPU check's --tiny run on CPU (the test suite)
CHECK_TINY = ModelShape(depth=2, width=32, heads=2, kv_heads=2, context=64, short_window=32)
# the proposal's 64M proxy: depth 7, width 640 (5 heads of 128) gives 65,864,334 parameters
PROXY64M = ModelShape(depth=7, width=640, heads=5, kv_heads=5, context=2048, short_window=1024)
