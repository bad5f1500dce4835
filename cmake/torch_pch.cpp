// Compiled only to produce the precompiled <torch/torch.h> (see WantrainTorch.cmake).
