#!/usr/bin/env python3
"""diffusers' own WanTransformer3DModel as the peer of wantrain's WanModel.

Builds the model from a diffusers config (from_config), gives every weight a
random value (seeded), saves it as diffusers saves models (save_pretrained,
in several shards with their index) into ROOT/transformer, writes ROOT's
model_index.json as a pipeline folder has it, and runs the model's forward
on the inputs of INPUTS (safetensors: x [B, C, F, H, W], t [B] or [B, L],
context [B, Lc, D], and for image-to-video y [B, 4 + C, F, H, W] and
clip_fea [B, N, 1280]; for a WanVACETransformer3DModel vace_context [B, 96,
F, H, W] and vace_scale [1], its control_hidden_states and every layer's
control_hidden_states_scale). The text is padded with zeros to 512 tokens, as
WanPipeline pads prompt embeddings (max_sequence_length); y is joined to x
along the channels, as WanImageToVideoPipeline joins the condition.
Writes the output (`out`) to OUT, with `v1000`: the first sample's
velocity at timestep 1000 alone (what one Euler step from pure noise takes),
and for that step wansample's inputs beside OUT: noise.h5 (/noise, the first
sample's x) and text.h5 (/text_emb, its context).

With --load, the model is not built but loaded from ROOT as diffusers
loads a pipeline's transformer (from_pretrained(ROOT, subfolder=
"transformer")), e.g. what wantrain export --format diffusers wrote: a
missing, unexpected or mismatched tensor fails the run.

Usage: diffusers_transformer.py CONFIG_JSON ROOT INPUTS OUT
       diffusers_transformer.py --load ROOT INPUTS OUT
"""

import json
import sys

import os

import h5py
import torch

try:
    from diffusers import WanTransformer3DModel, WanVACETransformer3DModel
    from safetensors.torch import load_file, save_file
except ImportError as e:
    sys.exit(f"diffusers_transformer.py: {e}: the peers are installed by scripts/install-peers.sh "
             "(scripts/test.sh runs it)")


CLASSES = {"WanTransformer3DModel": WanTransformer3DModel, "WanVACETransformer3DModel": WanVACETransformer3DModel}


def load(root):
    with open(f"{root}/transformer/config.json") as f:
        cls = CLASSES[json.load(f)["_class_name"]]
    model, info = cls.from_pretrained(root, subfolder="transformer", output_loading_info=True)
    wrong = {k: v for k, v in info.items() if v}
    if wrong:
        sys.exit(f"diffusers_transformer.py: {root}/transformer does not load cleanly: {wrong}")
    return model.eval()


def build(config, root):
    torch.manual_seed(7)
    cls = CLASSES[config["_class_name"]]
    model = cls.from_config(config).eval()
    with torch.no_grad():
        for p in model.parameters():  # diffusers zero-initialises some: every weight must matter
            p.copy_(torch.randn_like(p) * 0.2)
    model.save_pretrained(f"{root}/transformer", max_shard_size="200KB", safe_serialization=True)
    with open(f"{root}/model_index.json", "w") as f:
        json.dump({"_class_name": "WanPipeline", "_diffusers_version": "0.42.1",
                   "transformer": ["diffusers", config["_class_name"]]}, f)
    return model


def main(config_path, root, inputs_path, out_path):
    if config_path is None:
        model = load(root)
        config = dict(model.config)
    else:
        with open(config_path) as f:
            config = json.load(f)
        model = build(config, root)
    inputs = load_file(inputs_path)
    x, t, context = inputs["x"], inputs["t"], inputs["context"]
    padded = torch.zeros(context.shape[0], 512, context.shape[2])
    padded[:, : context.shape[1]] = context
    if "y" in inputs:
        x = torch.cat([x, inputs["y"]], dim=1)
    clip = inputs.get("clip_fea")
    if clip is not None and config.get("pos_embed_seq_len"):
        # FLF2V: WanImageToVideoPipeline stacks the two pictures' features along
        # the batch, [2B, 257, D], and the image embedder joins each pair.
        clip = clip.reshape(-1, clip.shape[1] // 2, clip.shape[2])
    control = {}
    if "vace_context" in inputs:
        scale = torch.ones(len(config["vace_layers"])) * float(inputs["vace_scale"][0])
        control = {"control_hidden_states": inputs["vace_context"], "control_hidden_states_scale": scale}
    first = {k: v[:1] if k == "control_hidden_states" else v for k, v in control.items()}
    with torch.no_grad():
        out = model(hidden_states=x, timestep=t, encoder_hidden_states=padded,
                    encoder_hidden_states_image=clip, return_dict=False, **control)[0]
        pairs = 2 if clip is not None and config.get("pos_embed_seq_len") else 1
        v1000 = model(hidden_states=x[:1], timestep=torch.tensor([1000.0]), encoder_hidden_states=padded[:1],
                      encoder_hidden_states_image=None if clip is None else clip[:pairs], return_dict=False,
                      **first)[0]
    save_file({"out": out.contiguous(), "v1000": v1000.contiguous()}, out_path)
    here = os.path.dirname(out_path)
    with h5py.File(f"{here}/noise.h5", "w") as f:
        f["noise"] = inputs["x"][0].numpy()
    with h5py.File(f"{here}/text.h5", "w") as f:
        f["text_emb"] = context[0].numpy()


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(None if sys.argv[1] == "--load" else sys.argv[1], *sys.argv[2:])
