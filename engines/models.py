from __future__ import annotations

# Tiny Llama models for a real llama-server, made here (no model hub): a target and a draft as
# GGUF, with a tokenizer defined below and a knob that sets how often the draft agrees with the
# target, so the acceptance a real engine reports can be checked against a value known by
# construction.
#
#   python -m engines.models --out DIR [--agreement 0.75] [--seed 0]
#
# Construction. Both models are bigram lookups dressed as Llamas: every attention and FFN
# weight is zero, so each block passes the residual stream through unchanged (identity layers),
# and the logits are output @ rmsnorm(token_embd[last token]). The target's greedy next token is
# a fixed cycle over CYCLE_LENGTH "word" tokens: c_i -> c_(i+1), and every other token (what a
# prompt is made of) -> c_0. So every request, whatever its prompt, generates c_0 c_1 c_2 ...
# The draft follows the same cycle except at the positions the knob marks as disagreements,
# where it proposes a wrong word. The layers still cost real compute (the target has more and
# wider ones), so speculation pays on a CPU as it does on a GPU: one verify pass over k+1
# tokens costs about one decode step when the weights dominate.
#
# The word tokens are five characters ("\u2581" + two syllables) and the vocabulary has no
# pieces between single characters and whole words, so a prompt can never tokenize into one:
# prompts are characters (or bytes), and only the models produce words.
import argparse
import json
import random
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

CYCLE_LENGTH = 1024
SPACE = "\u2581"  # SentencePiece's word-boundary marker
_CONSONANTS = "bdfghjklmnprstvwz"
_VOWELS = "aeiou"
# Logit of the predicted token after the final rmsnorm: sqrt(n_embd) * scale, against at most
# a quarter of that for any other (random unit codes in n_embd dimensions): softmax ~ 1.
_SCALE = 4.0


@dataclass(frozen=True, slots=True)
class Shape:
    n_embd: int
    n_layer: int
    n_ff: int
    n_head: int = 4
    context_length: int = 4096


# The target is ~30x the draft's compute per token, as for a real draft/target pair.
TARGET_SHAPE = Shape(n_embd=256, n_layer=8, n_ff=4096)
DRAFT_SHAPE = Shape(n_embd=256, n_layer=2, n_ff=256)


@dataclass(frozen=True, slots=True)
class ModelPair:
    target: Path
    draft: Path
    agreement: float
    seed: int
    agrees: tuple[bool, ...]  # agrees[i]: the draft's next token after c_i is the target's

    def expected(self, *, n_max: int, max_tokens: int) -> SpecExpectation:
        return expected_speculation(self.agrees, n_max=n_max, max_tokens=max_tokens)

    def output_text(self, max_tokens: int) -> str:
        """What both servers generate for any prompt (greedy), detokenized."""
        words = cycle_words()
        return "".join(words[i % CYCLE_LENGTH] for i in range(max_tokens)).replace(SPACE, " ")


@dataclass(frozen=True, slots=True)
class SpecExpectation:
    """What llama-server's counters must show for one request of `max_tokens` output tokens."""

    drafts: int  # verify steps (llamacpp:spec_decode_num_drafts_total)
    draft_tokens: int  # llamacpp:spec_decode_num_draft_tokens_total
    accepted: int  # llamacpp:spec_decode_num_accepted_tokens_total

    @property
    def accept_length(self) -> float:
        return 1.0 + self.accepted / self.drafts if self.drafts else 1.0


def cycle_words() -> list[str]:
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    words = [SPACE + a + b for a in syllables for b in syllables]
    random.Random(7).shuffle(words)  # fixed: the vocabulary is part of the construction
    return words[:CYCLE_LENGTH]


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, token types) of the SentencePiece-style ("llama") vocabulary."""
    normal, control, unknown, byte = 1, 3, 2, 6  # llama.cpp's token types
    tokens = ["<unk>", "<s>", "</s>"]
    types = [unknown, control, control]
    tokens += [f"<0x{b:02X}>" for b in range(256)]  # byte fallback: any text tokenizes
    types += [byte] * 256
    chars = [SPACE] + [chr(c) for c in range(0x21, 0x7F)]
    tokens += chars
    types += [normal] * len(chars)
    words = cycle_words()
    tokens += words
    types += [normal] * len(words)
    scores = [0.0] * len(tokens)
    return tokens, scores, types


def agreement_pattern(agreement: float, seed: int = 0, *, spread: str = "even") -> tuple[bool, ...]:
    """Which cycle positions the draft gets right, a share `agreement` of them.

    "even": the misses evenly spaced (agreement 2/3: every third position), so every verify
    step accepts the same number of tokens and the figures have no spread to average away;
    "random": shuffled (seeded), so that runs of agreement vary as with a real draft model.
    """
    if not 0.0 <= agreement <= 1.0:
        raise ValueError(f"agreement must be within [0, 1], not {agreement}")
    miss = 1.0 - agreement
    if spread == "even":
        # position i is a miss when the running count of misses steps up there
        eps = 1e-9  # 1/3 * 3 must count as 1
        return tuple(int((i + 1) * miss + eps) == int(i * miss + eps) for i in range(CYCLE_LENGTH))
    if spread != "random":
        raise ValueError(f"spread must be 'even' or 'random', not {spread!r}")
    n_good = round(agreement * CYCLE_LENGTH)
    flags = [True] * n_good + [False] * (CYCLE_LENGTH - n_good)
    random.Random(f"agreement:{seed}").shuffle(flags)
    return tuple(flags)


def expected_speculation(
    agrees: tuple[bool, ...], *, n_max: int, max_tokens: int
) -> SpecExpectation:
    """Replay llama-server's greedy draft-simple loop on the construction.

    The first output token comes from the prompt (no draft). Then each step drafts
    min(n_max, remaining - 1) tokens (server-context.cpp get_n_draft_max: one token is left
    for the target's own), the target accepts the leading run the draft got right and adds
    one token of its own; with no room to draft it decodes one token plainly.
    """
    pos, emitted = 0, 1
    drafts = drafted = accepted = 0
    while emitted < max_tokens:
        k = min(n_max, max_tokens - emitted - 1)
        if k <= 0:
            pos += 1
            emitted += 1
            continue
        run = 0
        while run < k and agrees[(pos + run) % CYCLE_LENGTH]:
            run += 1
        drafts += 1
        drafted += k
        accepted += run
        pos += run + 1
        emitted += run + 1
    return SpecExpectation(drafts=drafts, draft_tokens=drafted, accepted=accepted)


def _codes(n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    codes = rng.standard_normal((n, dim)).astype(np.float32)
    unit: np.ndarray = codes / np.linalg.norm(codes, axis=1, keepdims=True)
    return unit


def write_model(
    path: Path, shape: Shape, next_of: list[int], *, name: str, scale: float = _SCALE
) -> None:
    """One GGUF file: a Llama whose greedy next token after token t is next_of[t]; ``scale``
    sets how peaked its next-token distribution is (``write_pair``'s ``target_scale``)."""
    import gguf  # imported here: only the engine tests and `make engines` need it

    tokens, scores, types = vocabulary()
    n_vocab = len(tokens)
    d = shape.n_embd
    codes = _codes(n_vocab, d, seed=11)  # shared by both models: one code per token
    embd = codes[np.asarray(next_of)]  # a token's embedding is the code of its successor
    output = (scale * codes).astype(np.float32)
    output[: n_vocab - CYCLE_LENGTH] = 0.0  # only words are ever predicted (never EOS)

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_context_length(shape.context_length)
    w.add_embedding_length(d)
    w.add_block_count(shape.n_layer)
    w.add_feed_forward_length(shape.n_ff)
    w.add_head_count(shape.n_head)
    w.add_head_count_kv(shape.n_head)
    w.add_rope_dimension_count(d // shape.n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(n_vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)

    w.add_tensor("token_embd.weight", embd)
    w.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    w.add_tensor("output.weight", output)
    square = np.zeros((d, d), dtype=np.float16)
    up = np.zeros((shape.n_ff, d), dtype=np.float16)
    down = np.zeros((d, shape.n_ff), dtype=np.float16)
    for i in range(shape.n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(d, dtype=np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            w.add_tensor(f"blk.{i}.{part}.weight", square)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(d, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", up)
        w.add_tensor(f"blk.{i}.ffn_up.weight", up)
        w.add_tensor(f"blk.{i}.ffn_down.weight", down)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_pair(
    out_dir: Path,
    *,
    agreement: float = 2 / 3,
    seed: int = 0,
    spread: str = "even",
    target_scale: float = _SCALE,
) -> ModelPair:
    """Write target.gguf and a draft for this agreement into `out_dir` (kept if present: the
    files are a pure function of the arguments). A `target_scale` below the default flattens
    the target's next-token distribution (its greedy choice unchanged), so that sampling at a
    temperature picks other tokens and rejects drafts: at the default a sampled token is the
    greedy one all but always (softmax ~ 1)."""
    created = not out_dir.exists()
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        return _write_pair(
            out_dir, agreement=agreement, seed=seed, spread=spread, target_scale=target_scale
        )
    except BaseException:
        # A failed first write leaves nothing behind: no empty directory that looks like models.
        if created:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise


def _write_pair(
    out_dir: Path, *, agreement: float, seed: int, spread: str, target_scale: float
) -> ModelPair:
    tokens, _, _ = vocabulary()
    first_word = len(tokens) - CYCLE_LENGTH
    agrees = agreement_pattern(agreement, seed, spread=spread)
    target_next = [first_word] * len(tokens)
    draft_next = [first_word] * len(tokens)
    for i in range(CYCLE_LENGTH):
        target_next[first_word + i] = first_word + (i + 1) % CYCLE_LENGTH
        wrong = (i + 1 + CYCLE_LENGTH // 2) % CYCLE_LENGTH
        draft_next[first_word + i] = first_word + ((i + 1) % CYCLE_LENGTH if agrees[i] else wrong)
    target = out_dir / (
        "target.gguf" if target_scale == _SCALE else f"target-s{target_scale:g}.gguf"
    )
    tag = f"{agreement:.4f}-{spread}" + (f"-{seed}" if spread == "random" else "")
    draft = out_dir / f"draft-{tag}.gguf"
    for path, shape, next_of, name, scale in (
        (target, TARGET_SHAPE, target_next, "specdash-tiny-target", target_scale),
        (draft, DRAFT_SHAPE, draft_next, f"specdash-tiny-draft-{tag}", _SCALE),
    ):
        if not path.exists():
            tmp = path.with_name(path.name + ".tmp")
            try:
                write_model(tmp, shape, next_of, name=name, scale=scale)
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
            tmp.replace(path)
    return ModelPair(target=target, draft=draft, agreement=agreement, seed=seed, agrees=agrees)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engines.models", description=__doc__)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--agreement", type=float, default=2 / 3, help="share of draft tokens right")
    p.add_argument("--spread", choices=["even", "random"], default="even")
    p.add_argument("--seed", type=int, default=0, help="for --spread random")
    p.add_argument("--n-max", type=int, default=3, help="--spec-draft-n-max, for the expectation")
    p.add_argument("--max-tokens", type=int, default=64, help="output length, for the expectation")
    args = p.parse_args(argv)
    pair = write_pair(args.out, agreement=args.agreement, seed=args.seed, spread=args.spread)
    expected = pair.expected(n_max=args.n_max, max_tokens=args.max_tokens)
    info = {
        "target": str(pair.target),
        "draft": str(pair.draft),
        "agreement": pair.agreement,
        "expected_per_request": asdict(expected) | {"accept_length": expected.accept_length},
    }
    json.dump(info, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
