"""A model directory an engine serves with random weights (`--load-format dummy`): the shipped
architecture's config.json and a local tokenizer whose vocabulary is exactly the config's
`vocab_size`.

Why the vocabulary must match: random weights emit ids anywhere in [0, vocab_size). With a
smaller tokenizer those ids decode to nothing, every stream looks empty, and the prompt tokens
kvbench synthesises are not the ones the engine counts. The tokenizer here is a small byte-level
BPE trained offline on a fixed word list, padded with vocabulary entries (" w0", " w1", ...) to
`vocab_size`, so every id decodes to text and the model keeps its real embedding and LM-head
shapes (the LM head is ~7% of Qwen3-8B's decode weight reads).

The padding is BPE vocabulary without merges, not added tokens: no text encodes to it, and a
tokenizer with 151,487 added tokens took 24 s per load in transformers 5.24 (the added-token
trie and specials bookkeeping), which SGLang 0.5.17 pays about eight times per server start
(tokenizer manager, scheduler, detokenizer, template checks): 60 of the 150 s an H200 start took."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from kvbench.errors import ModelError

_WORD_TEXT = ("the of and to in is it that for on with as was at by be this are from or have an "
              "they which one you had not but what all were when we there can said each code "
              "file test function return value error build server client cache block token "
              "model request import class self data path list")
WORDS = _WORD_TEXT.split()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                 "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}"
                 "<|im_start|>assistant\n{% endif %}")
PROVENANCE_FILE = "kvbench-dummy.json"


def shipped_shapes() -> list[str]:
    root = resources.files("kvbench.models") / "data" / "hf-config"
    return sorted(p.name.removesuffix(".json") for p in root.iterdir() if p.name.endswith(".json"))


def shipped_config(shape: str) -> dict:
    if shape not in shipped_shapes():
        raise ModelError(f"dummy-model shape {shape!r} is not shipped "
                         f"(allowed: {', '.join(shipped_shapes())})",
                         hint="or pass --config PATH to a model's config.json")
    root = resources.files("kvbench.models") / "data" / "hf-config"
    return json.loads((root / f"{shape}.json").read_text())


def shipped_processor(shape: str) -> dict[str, dict]:
    """A multimodal shape's processor files (file name -> JSON), which the engine loads at
    start even for text: SGLang builds the model's processor whenever the architecture is
    multimodal (sglang 0.5.17 managers/tokenizer_manager.py:464-484, and --enable-multimodal
    has no off switch), and transformers refuses a directory without preprocessor_config.json.
    {} for a text-only shape."""
    path = resources.files("kvbench.models") / "data" / "hf-config" / "processor" / f"{shape}.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def build_dummy_model(out: Path, config: dict, *, max_position_embeddings: int | None = None,
                      source: str = "", extra_files: dict[str, dict] | None = None) -> Path:
    """Write config.json, the tokenizer, `extra_files` (a multimodal shape's processor
    configs) and a provenance note into `out`; returns `out`."""
    vocab_size = config.get("text_config", config).get("vocab_size")
    if not isinstance(vocab_size, int) or vocab_size < 512:
        raise ModelError(f"config.json vocab_size {vocab_size!r} is not an integer >= 512")
    out.mkdir(parents=True, exist_ok=True)
    cfg = dict(config)
    # a multimodal checkpoint (Qwen3.5) keeps the language model's fields in text_config,
    # where the engines read them (sglang 0.5.17 configs/model_config.py get_hf_text_config)
    text = cfg
    if isinstance(cfg.get("text_config"), dict):
        text = cfg["text_config"] = dict(cfg["text_config"])
    if max_position_embeddings is not None:
        text["max_position_embeddings"] = max_position_embeddings
    tok = _tokenizer(vocab_size)
    # the engine stops on eos; ids must name tokens of this tokenizer
    ids = {"bos_token_id": tok.convert_tokens_to_ids("<|endoftext|>"),
           "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>")}
    cfg.update(ids)
    text.update(ids)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    for name, body in (extra_files or {}).items():
        (out / name).write_text(json.dumps(body, indent=2) + "\n")
    tok.save_pretrained(out)
    (out / PROVENANCE_FILE).write_text(json.dumps({
        "source": source, "vocab_size": vocab_size, "weights": "none (serve with --load-format "
        "dummy)", "max_position_embeddings": text.get("max_position_embeddings"),
    }, indent=2) + "\n")
    return out


def _tokenizer(vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = [" ".join(WORDS[(i * 13 + j * 7) % len(WORDS)] for j in range(32))
              for i in range(2000)]
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(
        vocab_size=min(vocab_size, 4096), special_tokens=SPECIAL, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    have = tok.get_vocab_size()
    # byte-level BPE spells the leading space "Ġ"; ids follow the trained and special tokens
    vocab.update({f"Ġw{i}": have + i for i in range(vocab_size - have)})
    tok = Tokenizer.from_str(json.dumps(spec))
    if tok.get_vocab_size() != vocab_size:
        raise ModelError(f"dummy tokenizer has {tok.get_vocab_size()} tokens, not {vocab_size}")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   bos_token="<|endoftext|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    return fast
