"""GPT is safe by construction: a model built by hand and moved with .to() has its context's
masks, and a compiled forward on a length nobody prepared stays one graph (counted by dynamo
on CPU) with the eager numbers. Its parameters and FLOPs counted from the config's shapes alone
(what --dry-run and a study's plan print) are those of the built model."""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import train
from shardqueue.study import presets
from training import model
from training.model import GPT, ModelConfig

CFG = ModelConfig(sequence_len=64, vocab_size=64, n_layer=2, n_embd=32, n_head=2, n_kv_head=2, short_window=16)


@pytest.fixture(autouse=True)
def one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def hand_built(use_flex):
    """GPT as a caller would build it without training.trainer.build_model."""
    torch.manual_seed(0)
    m = GPT(CFG, use_flex=use_flex).to("cpu")
    m.init_weights()
    return m


def compiled_counting(m, *xs):
    """m(x) for each x through one torch.compile with a backend that runs each captured graph as
    it is (the graphs dynamo hands to inductor): the outputs, the graphs and the graph breaks."""
    from torch._dynamo.utils import counters

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    counters.clear()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = torch.compile(m, backend=backend, dynamic=False)
            outs = [compiled(x) for x in xs]
    finally:
        torch._dynamo.reset()
    return outs, len(graphs), sum(counters["graph_break"].values())


# the eager reference forward runs flex attention uncompiled on purpose (torch warns once a process that it is unfused)
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("use_flex", [False, True])
def test_compiled_forward_is_one_graph_per_length_with_the_eager_numbers(use_flex):
    """Layers S, L. Length 40, which nobody prepared: a mask built outside the graph broke it (3
    breaks and 7 graphs for these two layers, before); traced into the graph, none; the mask is
    not cached, and an eager forward builds and keeps it. SDPA also at the context, 64, whose
    masks .to() prepared: one graph per length (dynamic=False), no break."""
    m = hand_built(use_flex)
    x = torch.randint(0, 64, (2, 40))
    xs = [x] if use_flex else [x, torch.randint(0, 64, (2, 64))]
    outs, graphs, breaks = compiled_counting(m, *xs)
    assert (graphs, breaks) == (len(xs), 0)
    assert not any(k[1] == 40 for k in m.attend._masks)
    with torch.no_grad():
        want = m(x)
    assert torch.equal(outs[0], want)
    assert sorted(k[1:3] for k in m.attend._masks) == [(40, 16), (64, 16)]


def test_moving_a_model_prepares_its_masks_on_the_new_device():
    m = GPT(CFG)
    assert [k for k in m.attend._masks] == []  # built on the default device, nothing moved yet
    m.to("cpu")
    assert list(m.attend._masks) == [("dense", 64, 16, "cpu", None)]
    with torch.device("meta"):
        meta = GPT(CFG)
    meta.to("meta")  # a meta model (parameter counts) builds nothing
    assert meta.attend._masks == {}


@settings(max_examples=30, deadline=None)
@given(layers=st.integers(1, 9), heads=st.sampled_from([1, 2, 4]), kv_share=st.sampled_from([1, 2, 4]),
       head_dim=st.sampled_from([2, 4, 8]), vocab=st.integers(2, 300), gate=st.integers(1, 8),
       context=st.integers(4, 64), short=st.integers(1, 64), pattern=st.sampled_from(["SSSL", "L", "S", "SL"]))
def test_the_counts_from_the_shapes_are_the_built_models(layers, heads, kv_share, head_dim, vocab, gate, context,
                                                         short, pattern):
    kv_heads = max(1, heads // kv_share)
    d = heads * head_dim
    mc = ModelConfig(sequence_len=context, vocab_size=vocab, n_layer=layers, n_embd=d, n_head=heads,
                     n_kv_head=kv_heads, window_pattern=pattern, short_window=short, ve_gate_channels=min(gate, d))
    built = GPT(mc)
    assert mc.parameter_counts() == built.param_groups_counts()
    assert mc.parameter_counts()[0] == sum(p.numel() for p in built.parameters())
    assert mc.flops_per_token() == built.flops_per_token()


def test_a_dry_run_and_a_study_plan_build_no_model(monkeypatch, capsys):
    """Neither builds the model to count it (a meta-device build imports torch._dynamo: 1.6 s of CPU)."""
    def no_build(self, *a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(model.GPT, "__init__", no_build)
    assert presets.model_size("tiny")[0] > 0
    info = train.dry_run(train.resolve_config(None, ["depth=2", "width=32", "heads=2", "kv_heads=2", "vocab=400"]))
    # by hand: d = 32, vocab 400, 2 layers, value embeddings on layer 1: token, value and head matrices 3 x 12,800,
    # attention 4 x 1,024 and MLP 2 x 4,096 a layer (24,576), the gate 32 x 2, 4 scalars
    assert info["parameters"] == 63_044 and "parameters      63,044" in capsys.readouterr().out
