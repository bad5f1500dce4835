#!/usr/bin/env python3
"""transformers' own UMT5EncoderModel as the peer of wantrain's umT5.

Builds the encoder from the UMT5Config keys of CONFIG, gives its weights
random values (seeded; the norms around 1, the position biases spread), saves
it with save_pretrained into ROOT/text_encoder (as a diffusers pipeline keeps
it), and runs it on INPUTS (safetensors: ids [B, L] and mask [B, L], 1 for
a token; stored as floats, whole numbers). Writes last_hidden_state (`out`) to OUT.

Usage: umt5_encoder.py CONFIG ROOT INPUTS OUT
"""

import json
import sys

import torch

try:
    from safetensors.torch import load_file, save_file
    from transformers import UMT5Config, UMT5EncoderModel
except ImportError as e:
    sys.exit(f"umt5_encoder.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


def main(config_path, root, inputs_path, out_path):
    with open(config_path) as f:
        config = UMT5Config(**json.load(f))
    torch.manual_seed(13)
    model = UMT5EncoderModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            elif "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / p.shape[-1] ** 0.5)
    model.save_pretrained(f"{root}/text_encoder", safe_serialization=True)
    inputs = load_file(inputs_path)
    with torch.no_grad():
        out = model(input_ids=inputs["ids"].long(), attention_mask=inputs["mask"].long()).last_hidden_state
    save_file({"out": out.contiguous()}, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
