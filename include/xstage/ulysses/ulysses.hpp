#pragma once
// Ulysses attention on a World: head-sharded Q, K, V in, sequence-sharded O
// out (include/xstage/ulysses/ulysses_layout.hpp), in five variants:
//   attention-only  the attention kernel with its local epilogue, no all-to-all
//                   (the floor);
//   sequential      the same kernel, then the communication layer's
//                   all-to-all (copy engine, store kernel or NCCL's);
//   pipelined       the overlap a user builds without a fused kernel: the same
//                   kernel one chunk (heads x query rows) at a time on a
//                   stream of its own, each chunk's part of the all-to-all
//                   (any of sequential's versions) sent on the world's
//                   streams while the next chunk computes, the whole run
//                   replayed as one CUDA graph
//                   (include/xstage/ulysses/ulysses_chunks.hpp);
//   fused           the all-to-all in the kernel's epilogue: each output row
//                   is stored straight to its owner and flagged; receivers
//                   wait on their flags (docs/design/ulysses.md);
//   coupled         fused, but every tile waits until its stores are
//                   remotely visible before its SM moves on (the
//                   completion-coupled counterfactual made real).
// Emulated ranks run as one kernel launch over all P ranks (each rank's
// shards laid one after another); peer and nccl ranks launch on their own GPU.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xstage/attention/attention.hpp"
#include "xstage/comm/a2a.hpp"
#include "xstage/comm/remote_store.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/ulysses/ulysses_layout.hpp"

namespace xstage {

enum class UlyssesVariant { attention_only, sequential, pipelined, fused, coupled };
std::string to_string(UlyssesVariant v);  // "attention-only", "sequential", "pipelined", "fused", "coupled"
UlyssesVariant parse_ulysses_variant(std::string_view text);
bool is_fused(UlyssesVariant v);  // fused or coupled

// How the fused variants' epilogue sends rows (StorePath) and when they
// publish flags (Completion): xstage/comm/remote_store.hpp, shared with the kernels.
// The coupled variant publishes with Completion::coupled whatever `flags` says.

enum class TileOrder { linear, rotated };
std::string to_string(TileOrder o);  // "linear", "rotated"
TileOrder parse_tile_order(std::string_view text);

// The tile order as the kernel walks it: for each source rank, the m-blocks
// (BLOCK_M query rows) in the order they are computed within every (b, head).
// linear: 0, 1, 2, ...; rotated: round-robin over the destination ranks,
// starting at src + 1, so that concurrent tiles of one rank, and the tiles of
// different ranks at the same position, target different receivers.
std::vector<int> ulysses_tile_order(const UlyssesLayout& layout, int block_m, TileOrder order, int src_rank);

struct UlyssesRun {
  UlyssesVariant variant = UlyssesVariant::fused;
  // fused and coupled; none: default_store_path(kernel, variant, flags), chosen by measurement
  std::optional<StorePath> store = std::nullopt;
  TileOrder order = TileOrder::rotated;           // fused and coupled
  Completion flags = Completion::at_exit;         // fused; default by measurement (perf-log f8)
  A2aVersion a2a = A2aVersion::copy_engine;       // sequential and pipelined
  // pipelined: head chunks per rank, 1 .. H/P, and row chunks of the
  // sequence, 1 .. kMaxPipelineChunks; where both are 0,
  // default_pipeline_split; where one is 0, that one is 1.
  int chunks = 0;
  int row_chunks = 0;
  bool graph = true;  // pipelined: replay as one CUDA graph where the process drives one GPU
  int paced_rows = 0;  // paced: fewest rows a send carries (0: kDefaultPacedRows)
  bool test_receivers_time_out = false;  // tests only: receivers wait for a flag value no run sets
  double timeout_s = 60;                          // receivers' flag waits
};

// The store path of a run that names none, by measurement (docs/RESULTS.md
// section 4, the paired sequence sweeps): fused on the wgmma kernel,
// paced-warp (the least residual of the five paths on the PCIe path up to
// S = 32k, within the rounds' spread beyond, and within 1.3 points of the
// best with device buffers); fused on the mma
// kernel, which has no producer warpgroup to send, paced; coupled, vector16
// (the paced paths have no coupled form; bulk's coupled form is slower).
// paced-warp publishes its flags at exit only: with lagged flags the default
// is paced, with eager ones vector16, so that every (kernel, variant, flags)
// has a default that runs.
StorePath default_store_path(AttentionKernel kernel, UlyssesVariant variant,
                                     Completion flags = Completion::at_exit);

// Whether the fused kernel runs a store path with a variant and flag timing
// (the coupled variant has its own timing, `flags` is not looked at), on the
// attention kernel (AttentionKernel::mma_sync or wgmma_pingpong); when not, a
// sentence that says why.
std::optional<std::string> ulysses_combination_error(StorePath store, UlyssesVariant variant, Completion flags,
                                                     AttentionKernel kernel);

// The embedded profile of the path a world's outputs take (the pipelined
// split's link rate; the bench's prediction). Never "".
std::string default_ulysses_profile(Backend b, Placement p);

// The pipelined variant's (head chunks, row chunks) when a run names
// neither: ulysses_default_split (xstage/ulysses/ulysses_chunks.hpp) with the
// all-to-all's time over the attention's estimated from the bytes a GPU
// sends at `link_Bps` and the attention's FLOPs at kAttentionFlopsPerSecond.
// group_ranks: the ranks one process launches together (all of them when
// emulated, else 1); the nccl version takes row chunks 1 (its equal slots).
std::pair<int, int> default_pipeline_split(int64_t B, int64_t S, int64_t heads_per_rank, int64_t D, int group_ranks,
                                           int64_t block_m, int tiles_per_wave, double link_Bps,
                                           A2aVersion version = A2aVersion::copy_engine);

// The rate the estimate takes for the attention kernel: the wgmma kernel's
// at D = 128 on one H200, 4 B S^2 H D FLOPs in 20.3 ms at S = 32k, H = 24
// (docs/RESULTS.md section 8). Only the estimate's order of magnitude
// matters: it places the split's thresholds (0.03 and 1).
inline constexpr double kAttentionFlopsPerSecond = 6.5e14;

// The paced path's default slice: 16 rows (4 KiB an SM at D = 128, one
// 16-byte store per consumer thread), chosen by measurement (docs/perf-log.md, f8).
inline constexpr int kDefaultPacedRows = 16;

// Everything one world needs for Ulysses attention on shapes up to a maximum
// sequence length: inputs, local outputs, the symmetric sequence-sharded
// output and flags. Not thread-safe; one per world.
class UlyssesAttention {
 public:
  // B, H (total heads), D fixed; S up to max_S. Throws xstage::Error for a
  // bad shape (H % P, D not in {64, 128}, sizes < 1). kernel: the attention
  // kernel every variant runs, wgmma (AttentionKernel::wgmma_pingpong with
  // 128-key tiles, also at D = 64) or AttentionKernel::mma_sync (the first
  // kernel; it alone has the vector16-wt and vector16-cs store paths).
  UlyssesAttention(World& world, int64_t B, int64_t H, int64_t D, int64_t max_S,
                   AttentionKernel kernel = AttentionKernel::wgmma_pingpong);
  ~UlyssesAttention();
  UlyssesAttention(const UlyssesAttention&) = delete;
  UlyssesAttention& operator=(const UlyssesAttention&) = delete;

  // Selects S (<= max_S): layouts, tile orders, all-to-all plans.
  void set_sequence(int64_t S);
  const UlyssesLayout& layout() const;

  // Draws every local rank's head-sharded Q, K, V from `seed` on the GPU:
  // element i of rank r's shard of tensor t (0 q, 1 k, 2 v) is
  // fill::fill_random_value(seed, 3 * r + t, i) rounded to bf16.
  void fill_inputs(uint64_t seed);

  // Enqueues one run between world.fork() and world.join() (see run()).
  void enqueue(const UlyssesRun& run);
  // One run, synchronised (fork, enqueue, join, barrier).
  void run(const UlyssesRun& run);
  // Throws xstage::Error naming the rank, flag and values when a fused run's
  // receiver wait timed out (the kernel then ends without its data; run()
  // checks after every run, callers of enqueue() after they synchronise).
  void check_receivers() const;

  // Poisons every local rank's sequence-sharded output (0xFF bytes: bf16 NaN)
  // and, for attention-only, its local head-sharded output.
  void poison_outputs();

  // Local rank r's results, downloaded: its sequence-sharded output
  // [B, S_r, H, D] and its head-sharded attention output [B, S, H/P, D] (bf16 bits;
  // after attention-only or sequential: the pipelined variant leaves the
  // local output staged across the ranks of a launch instead).
  std::vector<uint16_t> download_output(int rank) const;
  std::vector<uint16_t> download_local_attention(int rank) const;

  // Check of a variant: runs attention-only (the local head-sharded results),
  // poisons the outputs, runs `run`, and compares every local rank's
  // sequence-sharded output bit for bit with the local results permuted on
  // the CPU (sequential, pipelined, fused and coupled compute every tile
  // identically; a pipelined send that ran before its chunk's attention
  // would carry the poisoned local output).
  // For fused and coupled, also that exactly the flags of the tiles whose
  // rows a rank owns hold this run's epoch. Collective under nccl (every
  // process returns a failure when one finds it). Returns "" or the first
  // mismatch (rank, b, row, head, column, expected, got; or the flag).
  std::string check_against_local(const UlyssesRun& run);

  // Relative error ||O - ref|| / ||ref|| of `rows` sampled output rows of the
  // local ranks' sequence-sharded outputs against an fp64 CPU reference
  // recomputed from the seeded inputs (after fill_inputs(seed) and a run).
  double sampled_rel_error(uint64_t seed, int rows, uint64_t sample_seed) const;

  // Writes DIR/q.npy, k.npy, v.npy (the global [B, S, H, D] inputs, redrawn
  // from `seed` on the CPU) and DIR/o.npy (every rank's sequence-sharded
  // output, assembled), all float32, for a check against any framework
  // (bench/ulysses_vs_sdpa.py). Needs every rank in this process.
  void dump_npy(const std::string& dir, uint64_t seed) const;

  // Ordering as a consumer outside the kernel sees it: runs `run` (fused or
  // coupled) once and checks it (check_against_local), keeps its outputs as
  // the reference, poisons the outputs and runs it again while this thread
  // polls every completion flag in host memory. Each flag, the moment it
  // holds the new run's epoch, must find every row of its tile already
  // there: a poisoned or wrong row means a flag became visible before its
  // data. Needs emulated ranks with host buffers (the flags and outputs are
  // mapped host memory the CPU reads while the kernel writes over PCIe).
  // Returns "" or the first problem (rank, slot, row); `seen_while_running`
  // (if given) counts the flags first seen before the kernel had finished.
  std::string check_flags_in_flight(const UlyssesRun& run, int* seen_while_running = nullptr);

  // Where the runs write: every rank's sequence-sharded output [B, S_r, H, D]
  // (bf16) and its completion flags (layout: src/device/ulysses/
  // params.hpp), placed as the world says; and the epoch the last
  // fused or coupled run published (its flags hold it; a new run publishes
  // epoch() + 1).
  const SymmetricBuffer& output_buffer() const;
  const SymmetricBuffer& flag_buffer() const;
  uint64_t epoch() const;
  World& world() const;

  // Kernel geometry for the model: tiles of the whole launch(es) and how many
  // run at once on one GPU.
  int64_t tiles_per_gpu() const;
  int concurrent_tiles_per_gpu() const;
  int block_m() const;
  AttentionKernel kernel() const;

 private:
  std::string check_flags(int rank) const;
  std::string agree_on_failure(const std::string& bad) const;  // collective
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
