#!/usr/bin/env python3
"""transformers' own tokenizer of umT5, as WanPipeline calls it, as the peer of wantrain's.

Trains a SentencePiece unigram model on CORPUS with umT5's special ids (pad
0, EOS 1, unk 2, no BOS), byte fallback and nmt_nfkc, into DIR/spiece.model.
transformers converts it into its fast T5 tokenizer (with EXTRA extra ids,
added tokens) and saves that with save_pretrained into ROOT/tokenizer (a
tokenizer.json, as a diffusers pipeline keeps it). That folder is loaded
again with AutoTokenizer, and the prompts of PROMPTS (a JSON list) are
cleaned with diffusers' prompt_clean and tokenized as WanPipeline's
_get_t5_prompt_embeds does: padding to max_length LENGTH, truncation, the
special tokens added. Writes `ids` and `mask` [B, LENGTH] to OUT.

Usage: umt5_tokenizer.py CORPUS DIR ROOT PROMPTS LENGTH EXTRA OUT
"""

import json
import os
import sys

import torch

try:
    import sentencepiece
    from diffusers.pipelines.wan.pipeline_wan import prompt_clean
    from safetensors.torch import save_file
    from transformers import AutoTokenizer, T5Tokenizer
except ImportError as e:
    sys.exit(f"umt5_tokenizer.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it), sentencepiece by scripts/install-deps.sh")


def main(corpus, model_dir, root, prompts_path, length, extra, out_path):
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=os.path.join(model_dir, "spiece"), model_type="unigram", vocab_size=400,
        hard_vocab_limit=False, character_coverage=0.995, byte_fallback=True, normalization_rule_name="nmt_nfkc",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, minloglevel=2)
    T5Tokenizer.from_pretrained(model_dir, extra_ids=int(extra)).save_pretrained(os.path.join(root, "tokenizer"))
    tokenizer = AutoTokenizer.from_pretrained(os.path.join(root, "tokenizer"))
    with open(prompts_path) as f:
        prompts = [prompt_clean(p) for p in json.load(f)]
    tokens = tokenizer(prompts, padding="max_length", max_length=int(length), truncation=True,
                       add_special_tokens=True, return_attention_mask=True, return_tensors="pt")
    save_file({"ids": tokens.input_ids.to(torch.float32), "mask": tokens.attention_mask.to(torch.float32)}, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 8:
        sys.exit(__doc__)
    main(*sys.argv[1:])
