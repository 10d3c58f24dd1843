"""Prompt synthesis and a tokenizer that cannot carry word prompts (byte-level BPE with no
merges: no word is one token): text prompts are refused, token-id prompts switch to plain
ids and stay exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbench.errors import WorkloadError
from kvbench.workload.prompt import PromptBuilder, Vocabulary
from kvbench.workload.session import Turn


@pytest.fixture(scope="module")
def bytes_only(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=len(alphabet) + 1, special_tokens=["<|end|>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tok.train_from_iterator(["the cache holds the page"] * 10, trainer=trainer)
    out = tmp_path_factory.mktemp("bytes-tok")
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>").save_pretrained(out)
    return out


def test_text_prompts_are_refused(bytes_only):
    with pytest.raises(WorkloadError, match="has only 0 single-token words") as e:
        Vocabulary(str(bytes_only))
    assert "--endpoint completions" in (e.value.hint or "")


def test_token_id_prompts_switch_to_plain_ids_and_stay_exact(bytes_only):
    from transformers import AutoTokenizer

    vocab = Vocabulary(str(bytes_only), token_ids=True)
    assert vocab.switched and "prompts are plain token ids" in vocab.switched
    special = set(AutoTokenizer.from_pretrained(str(bytes_only)).all_special_ids)
    assert vocab.ids and not special & set(vocab.ids)
    prompt = PromptBuilder(vocab, "run", token_ids=True).build(
        Turn(200, 8, (1, 2, 3, 4), 64), "s", "tail")
    assert prompt.num_tokens == 200 and len(prompt.token_ids) == 200
