"""What --help says of the loaders in this package: each library and its version, and which run as rules (kept
apart so that --help imports nothing heavy; tests/test_audit_loaders_rules.py checks the versions against
requirements-audit.lock)."""

RAN = {"megatron-core": "0.16.1", "grain": "0.2.18"}  # installed, their code runs (requirements-audit.lock)
# the audit runs rules written from these; their code runs only in the tests (requirements-real-libs.lock)
RULES = {"llm-foundry": "0.22.0", "llamafactory": "0.9.5", "axolotl": "0.19.0"}
WHY_RULE = "their pins move this project's torch or numpy"


def help_line() -> str:
    return (f"megatron_gpt, megatron_blend (megatron-core {RAN['megatron-core']}) and grain_first_fit, grain_best_fit, "
            f"grain_concat_split (grain {RAN['grain']}, MaxText's pipeline) run their library's code; foundry_concat, "
            f"foundry_no_wrap, foundry_binpack (llm-foundry {RULES['llm-foundry']}), llamafactory_pt (llamafactory "
            f"{RULES['llamafactory']}) and axolotl_completion, axolotl_chat_template (axolotl {RULES['axolotl']}) run a rule written here from "
            f"that code, not the code ({WHY_RULE})")
