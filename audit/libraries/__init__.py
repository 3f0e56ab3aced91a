"""The loaders most pretraining runs on, as packers the audit traces: Megatron-Core and Grain run their own code
(the 'audit-libs' extra pins them); llm-foundry, LLaMA-Factory and axolotl, whose pins do not install beside
this project's torch and numpy, run a rule written here from their code, which the report's "how" says.

    registry.py      the loaders as Specs (audit/adapters.py adds them to SPECS)
    about.py         what --help says of them: each library and version, and which run as rules
    common.py        the Spec the audit runs, the tracer's marker ids, the Plan a loader that needs the budget gets
    args.py          --loader-arg KEY=VALUE: a loader's seed, split, blend weights, bins, ...; checked first
    megatron.py      megatron_gpt: GPTDataset over an indexed dataset of tracer documents (megatron-core)
    megatron_blend.py  megatron_blend: BlendedDataset over one dataset per label, each with its own epochs
    grain.py         grain_first_fit, grain_best_fit, grain_concat_split: MaxText's pipeline on grain's packers
    foundry.py       foundry_concat, foundry_no_wrap, foundry_binpack: llm-foundry's rules
    llamafactory.py  llamafactory_pt: LLaMA-Factory's per-map-batch pretraining packing, as a rule
    axolotl.py       axolotl_completion, axolotl_chat_template: axolotl's samples (raw text cut into pieces, or a
                     chat sample dropped when too long) and multipack sampler, as a rule

Every loader here packs rows of seq_length = R - 1 tokens (the length each library is configured with: 2048 at
the default R = 2049), which must be at least 2 (Megatron's build_sample_idx asserts seq_length > 1,
helpers.cpp:166).
"""
