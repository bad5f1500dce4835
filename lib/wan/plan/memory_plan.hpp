// The memory plan of a training run: what each rank holds (weights,
// gradients, optimizer state, EMA, a frozen base or teacher, the loader's
// batches, the checkpoint snapshot) and the activations of one step at its
// batch and token count, with and without activation checkpointing, worked
// out from the shapes before anything is allocated. Every wantrain start-up
// banner (and --dry-run) prints it; `wanbench model --tokens-sweep` measures
// it (docs/model.md).
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "wantrain/wan/plan/activation_memory.hpp"
#include "wantrain/wan/model/lora.hpp"
#include "wantrain/wan/model/model_config.hpp"

namespace wt::wan {

struct MemoryPlanSettings {
  WanConfig model;
  ActivationSettings step;  // batch, latents, compute dtype, attention chunk, checkpointing
  bool optimizer = true;    // AdamW's two moments (false: forward and backward only)
  bool ema = false;
  // ZeRO-1 and 2 (--zero): the moments and EMA are split over this many
  // ranks, and a reduced gradient slice of 1/zero_shards joins the
  // gradients; 1: off.
  int zero_shards = 1;
  // ZeRO-2 (--zero 2): the gradients too are 1/zero_shards slices, with the
  // Reducer's buckets alive only while they reduce: up to
  // buckets_in_flight reducing beside the one filling, at bucket_bytes
  // (--bucket-mb; a parameter larger than that is a bucket of its own).
  int zero_stage = 0;
  double bucket_bytes = 25.0 * (1 << 20);
  int buckets_in_flight = 2;  // distributed::ReducerOptions::buckets_in_flight
  // ZeRO-3 (--zero 3): the weights too are 1/zero_shards fp32 slices; the
  // root (embeddings, head) is gathered in fp32 for the step and up to 3
  // blocks at once in gather_dtype; the buckets are the units.
  at::ScalarType gather_dtype = at::kFloat;
  // LoRA: the adapters are trained, the model is a frozen base whose block
  // Linears are held in base_dtype.
  LoraOptions lora;  // rank 0: no LoRA
  at::ScalarType base_dtype = at::kFloat;
  // Without LoRA: a VACE model's branch trained alone, in full; the rest a
  // frozen base in fp32 (blocks_to_swap applies to it as to LoRA's).
  bool vace_branch_only = false;
  // LoRA: the frozen weights of the first N blocks in host memory, two
  // blocks of them on the device at once (the one running, the next coming);
  // past num_layers, a VACE model's VACE blocks (up to two of them on the
  // device at once).
  int64_t blocks_to_swap = 0;
  std::optional<WanConfig> teacher;  // distillation
  bool teacher_bf16 = false;         // its Linears in bf16, the rest fp32
  // A LoRA few-step student whose frozen base is the teacher's weights (no
  // --init, no swapped blocks): what both hold in the same dtype is held once.
  bool teacher_shares_base = false;
  // Distribution matching (--distill-method dmd): a fake score of the
  // teacher's config trained in full beside the student, its gradients,
  // moments and EMA as the student's are kept, and its graph alive with the
  // student's until the backward.
  bool fake_score = false;
  // --fake-score-lora-rank: the fake score as adapters of this rank on a
  // frozen base that holds the teacher's tensors (nothing beyond them).
  int64_t fake_score_lora_rank = 0;
  int prefetch = 0;         // the loader's batches waiting beside the one in use
  double sample_bytes = 0;  // one sample's latents, text and noise as the loader hands them over
  int loader_shapes = 1;    // buckets: the loader keeps batch buffers per shape (sample_bytes sums them)
  double staged_bytes = 0;  // one sample's parts the loader reads as stored before converting
  // The dtype gradients are reduced in: a 16-bit one keeps a 16-bit copy of
  // the fp32 buckets (EngineOptions::grad_comm_dtype).
  at::ScalarType grad_comm_dtype = at::kFloat;
  // This rank (rank 0) copies the weights and the state for the checkpoint
  // writer; with zero_shards > 1 every other rank copies its share of the state.
  bool checkpoint_snapshot = false;
  double runtime_bytes = 0;  // the process before any of this (libraries, MPI): measured
  bool on_device = false;    // model state and activations on a GPU; the rest on the host
  // --sample-prompts: at each draw the VAE's weights and its decode of the
  // largest prompt's frame (beside what training holds; counted in full,
  // though a step's activations are gone by then), and umT5 at start-up,
  // before the model (its weights: the start-up peak with the runtime).
  double prompt_video_bytes = 0, prompt_t5_bytes = 0;
};

struct MemoryItem {
  std::string name;    // "parameters", "activations", ...
  std::string detail;  // what it is, in a few words
  double bytes = 0;
  bool on_device = false;
};

struct MemoryPlan {
  std::vector<MemoryItem> items;
  ActivationMemory activations;   // as the run is set
  ActivationMemory alternative;   // the other way: without checkpointing if set, else with every block
  double teacher_forward = 0;     // a distillation teacher's forward, before the student's step (the larger counts)
  double startup_host_bytes = 0;  // runtime + a teacher loaded on the host before it moves to the device

  double total() const;
  double device_total() const;  // on_device items (0 on a CPU run)
  double host_total() const;
  // The table `--dry-run` prints, one line per item and the totals.
  std::string describe() const;
};

MemoryPlan plan_memory(const MemoryPlanSettings& settings);

// What a job's plans are held against: each GPU (a plan for GPUs) and the
// memory of the node, shared by its ranks.
struct MemoryLimits {
  bool gpu_plan = false;               // the plans are for GPUs (MemoryPlanSettings::on_device)
  std::optional<double> device_bytes;  // each GPU's memory (nullopt: unknown, nothing compared)
  std::string device_source;           // where that figure comes from: "this rank's GPU (cuda:0)", ...
  double host_bytes = 0;               // this node's memory
  int ranks_on_host = 1;
};

// The host memory a node's ranks need together: rank 0's plan (`root`,
// with the checkpoint copy) and ranks_on_host - 1 others' (`other`), each
// at the larger of its running and start-up needs.
double host_per_node(const MemoryPlan& root, const MemoryPlan& other, int ranks_on_host);

// The lines after MemoryPlan::describe(): the limits, then each total with
// its verdict: on each GPU (a GPU plan) and the host per node.
std::string describe_limits(const MemoryPlan& root, const MemoryPlan& other, const MemoryLimits& limits);

// One line per limit the plans exceed (empty when they fit).
std::vector<std::string> memory_warnings(const MemoryPlan& root, const MemoryPlan& other, const MemoryLimits& limits);

// What sampling holds (wansample): the model's weights, with its blocks'
// Linears in `block_linear_dtype` (fp32 or bf16; the rest fp32), and one
// forward's tensors (inference_memory). With Wan2.2
// A14B's two experts both are held, unless the idle one waits in host
// memory (--offload-experts): then the device holds one expert at a time
// and the host the other.
struct SamplingMemory {
  double expert_bytes = 0;      // one model's weights
  double forward_bytes = 0;     // one forward without autograd
  int64_t attention_chunk = 0;  // the forward's attention chunk, auto resolved (0: the whole score matrix)
  int experts = 1, experts_on_device = 1;
  double device_bytes() const { return double(experts_on_device) * expert_bytes + forward_bytes; }
  double host_bytes() const { return double(experts - experts_on_device) * expert_bytes; }
};
SamplingMemory plan_sampling(const WanConfig& config, const ActivationSettings& step, int experts, bool offload_experts,
                             at::ScalarType block_linear_dtype = at::kFloat);

// "attention chunk 192 (auto)", "full attention": the chunk a forward runs
// with (`resolved`, 0 for the whole matrix), and whether it was chosen
// (`requested` nn::kAutoAttentionChunk) or given.
std::string describe_attention(int64_t requested, int64_t resolved);

// "1.5 GiB", "312 MiB": bytes for people.
std::string format_bytes(double bytes);

// The smallest --blocks-to-swap (LoRA runs) whose plan's device part fits
// in `device_bytes`, with the device part it leaves; nullopt when none does
// (the model's every block swapped is not enough) or the run has no LoRA.
struct SwapSuggestion {
  int64_t blocks = 0;
  double device_bytes = 0;
};
std::optional<SwapSuggestion> smallest_blocks_to_swap(MemoryPlanSettings s, double device_bytes);

}  // namespace wt::wan
