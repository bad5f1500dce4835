#!/usr/bin/env python3
"""diffusers' own LoRA loading as the peer of wansample's --lora.

Loads the transformer of the diffusers folder ROOT into a WanPipeline,
loads the LoRA file LORA with the pipeline's load_lora_weights (diffusers'
Wan LoRA loader, through peft), checks that every adapter found a layer,
and runs the adapted transformer's forward on INPUTS (safetensors: x [B, C,
F, H, W], t [B], context [B, Lc, D], the context padded with zeros to 512
tokens as WanPipeline pads prompts). Writes the output (`out`) to OUT.

Usage: diffusers_lora.py ROOT LORA INPUTS OUT
"""

import sys

import torch

try:
    from diffusers import WanPipeline, WanTransformer3DModel
    from safetensors.torch import load_file, save_file
except ImportError as e:
    sys.exit(f"diffusers_lora.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


def main(root, lora, inputs_path, out_path):
    transformer = WanTransformer3DModel.from_pretrained(root, subfolder="transformer").eval()
    pipe = WanPipeline(tokenizer=None, text_encoder=None, transformer=transformer, vae=None, scheduler=None)
    pipe.load_lora_weights(lora, adapter_name="wantrain")
    adapted = [name for name, _ in transformer.named_modules() if name.endswith("lora_A.wantrain")]
    expected = len([k for k in load_file(lora) if k.endswith("lora_A.weight")])
    if len(adapted) != expected:
        sys.exit(f"diffusers_lora.py: {lora}: {expected} adapters in the file, {len(adapted)} layers adapted")
    inputs = load_file(inputs_path)
    x, t, context = inputs["x"], inputs["t"], inputs["context"]
    padded = torch.zeros(context.shape[0], 512, context.shape[2])
    padded[:, : context.shape[1]] = context
    with torch.no_grad():
        out = transformer(hidden_states=x, timestep=t, encoder_hidden_states=padded, return_dict=False)[0]
    save_file({"out": out.contiguous()}, out_path)
    print(f"diffusers_lora.py: {len(adapted)} layers adapted")


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
