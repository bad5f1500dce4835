// Linear: a linear layer with PyTorch's parameter names (weight [out, in],
// bias [out]) and room for a LoRA adapter (a Wan block's attention q, k, v,
// o and FFN layers are these; wan/model/lora.hpp adds their adapters):
//
//   y = x W^T + b + scale * dropout(x) A^T B^T,   A [r, in], B [out, r]
//
// Without an adapter it is torch::nn::Linear exactly: the same initial
// values from the same generator draws, and the same forward.
//
// A frozen base may be held in bf16 (`dtype`): its product then runs in
// bf16, and the adapter's in the input's dtype. Under autocast both follow
// autocast, as any Linear does, on the input rounded once for both. Held
// in fp8 (float8_e4m3fn, with the scales of nn/fp8_weights.hpp in the
// buffer `weight_scale` and the bias in bf16), its weight is dequantised to
// bf16 (autocast's dtype under autocast) just before its product, and again
// in backward.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

namespace wt::nn {

// While one lives on this thread, Linears are allocated without drawing
// their weights (for a model whose weights are loaded next, e.g. Wan's
// WanInit::Empty).
class SkipWeightInit {
 public:
  SkipWeightInit();
  ~SkipWeightInit();
  SkipWeightInit(const SkipWeightInit&) = delete;
  SkipWeightInit& operator=(const SkipWeightInit&) = delete;

 private:
  bool was_;
};

class LinearImpl : public torch::nn::Module {
 public:
  // The weight and bias are drawn in fp32 and held in `dtype` (kFloat,
  // kBFloat16 or kFloat8_e4m3fn): a bf16 or fp8 layer holds the rounded
  // values of its fp32 twin.
  LinearImpl(int64_t in_features, int64_t out_features, at::ScalarType dtype = at::kFloat);
  at::Tensor forward(const at::Tensor& x);
  // weight ~ U(from, to), drawn in fp32 from LibTorch's global generator
  // and rounded (or quantised) to the weight's dtype.
  void fill_weight_uniform(double from, double to);

  // Adds the trainable pair lora_A (random, as PEFT: Kaiming-uniform with
  // a = sqrt(5), from LibTorch's global generator) and lora_B (zero), so
  // the output is unchanged until B is trained. scale = alpha / rank.
  void add_lora(int64_t rank, double alpha, double dropout);
  bool has_lora() const { return lora_A.defined(); }
  double lora_scale() const { return lora_scale_; }
  // weight += scale * B A, in fp32 (an fp8 weight is quantised again), then
  // the adapter is gone.
  void merge_lora();
  // weight += delta, summed in fp32 and rounded once into the weight's
  // dtype (an fp8 weight is quantised again, with new scales).
  void add_to_weight(const at::Tensor& delta);
  // An fp8 weight held in `dtype` from now on, as its dequantised values,
  // and its bias too; the scales are freed (the buffer stays registered,
  // empty). Nothing for another weight.
  void dequantize_fp8(at::ScalarType dtype);

  int64_t in_features, out_features;
  at::Tensor weight, bias, lora_A, lora_B;
  at::Tensor weight_scale;  // fp8 weights only: fp32 [out, ceil(in / 64)]

 private:
  double lora_scale_ = 0, lora_dropout_ = 0;
};
TORCH_MODULE(Linear);

// target ~ U(from, to) drawn in fp32 from LibTorch's global generator and
// rounded to target's dtype: for a bf16 target, the rounded values of the
// same draw into an fp32 tensor of its shape, without that tensor.
void fill_uniform_drawn_in_fp32(const at::Tensor& target, double from, double to);

}  // namespace wt::nn
