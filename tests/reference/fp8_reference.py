"""fp8 weights with block scales, as docs/lora.md states the rule, in torch:
the reference of tests/unit/wan/model/fp8_weights_test.cpp. Written from the rule, a
block of 64 inputs at a time, with torch's own float8_e4m3fn conversion.

  fp8_reference.py IN OUT   IN: F32 tensors [out, in]; OUT: per tensor NAME,
                            NAME.values (the e4m3 values as F32) and NAME.scales
"""
import sys

import torch

from wan_reference import read_safetensors, write_safetensors

BLOCK, E4M3_MAX = 64, 448.0


def quantize(w):
    rows, inputs = w.shape
    values = torch.empty(rows, inputs)
    scales = torch.empty(rows, (inputs + BLOCK - 1) // BLOCK)
    for b in range(scales.shape[1]):
        block = w[:, b * BLOCK:(b + 1) * BLOCK]
        largest = block.abs().amax(dim=1)
        scale = torch.where(largest > 0, largest / E4M3_MAX, torch.ones_like(largest))
        values[:, b * BLOCK:(b + 1) * BLOCK] = \
            (block / scale[:, None]).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()
        scales[:, b] = scale
    return values, scales


def main():
    out = {}
    for name, w in read_safetensors(sys.argv[1]).items():
        out[name + ".values"], out[name + ".scales"] = quantize(w)
    write_safetensors(sys.argv[2], out)


if __name__ == "__main__":
    main()
