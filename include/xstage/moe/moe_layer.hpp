#pragma once
// The expert-parallel MoE layer over a World (docs/design/moe-layer.md):
// per rank, x [T, hidden] bf16 with top-k expert ids and weights ->
//   dispatch  every rank learns every source's per-expert counts (remote
//             stores + release flags), then pulls the token rows routed to
//             its experts into a local pool, expert-major;
//   L1 + SwiGLU (times the routing weight), L2;
//   combine   each output row lands in the token owner's combine buffer
//             [top-k][T_max][hidden]; the owner sums a token's k rows in fp32
//             in slot order 0 .. k-1 (bit-reproducible).
// Experts are owned in blocks: rank r owns experts r * E/P .. (r+1) * E/P - 1.
// Variants (same output, bit for bit where the GEMM tiles match):
//   fused         L1 and L2 in one persistent kernel; L2's epilogue stores into
//                 the owners' combine buffers; tiles claimed as the schedule says;
//   unfused       the grouped GEMMs with local stores, then the combine's
//                 all-to-all as a user builds it (rows permuted per source,
//                 then the copy engine, or NCCL on the nccl backend);
//   compute_only  the fused kernel with every L2 store local (the floor).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xstage/comm/world.hpp"
#include "xstage/moe/moe.hpp"

namespace xstage {

struct MoeShape {
  std::string name;  // "deepseek-v3", ... or "custom"
  int hidden = 0, inter = 0, experts = 0, topk = 0;
};
// DeepSeek-V3 7168/2048/256/8, DeepSeek-V4-Flash 4096/2048/256/6, Qwen3-235B
// 4096/1536/128/8, Qwen3-30B-A3B 2048/768/128/8, Mixtral-8x7B 4096/14336/8/2,
// HiDream-I1 2560/6912/4/2.
const std::vector<MoeShape>& moe_known_shapes();
// The known shape of that name (moe-gemm's full name of Qwen3-235B,
// qwen3-235b-a22b, too), or nullopt.
std::optional<MoeShape> find_known_moe_shape(std::string_view name);
// A known name or "hidden/inter/experts/topk"; throws xstage::Error listing the names.
MoeShape parse_moe_shape(std::string_view text);

enum class MoeSchedule { expert_wave, interleaved, model_guided };
std::string to_string(MoeSchedule s);            // "expert-wave", "interleaved", "model-guided"
MoeSchedule parse_moe_schedule(std::string_view text);

enum class MoeLayerVariant { fused, unfused, compute_only };
std::string to_string(MoeLayerVariant v);        // "fused", "unfused", "compute-only"
MoeLayerVariant parse_moe_layer_variant(std::string_view text);

// What the fused kernel's claim policy gets (src/device/moe/fused_layer_params.hpp).
struct MoeSchedulePlan {
  MoeSchedule schedule = MoeSchedule::interleaved;
  // model-guided: the order the plan runs as (expert-wave or interleaved, as
  // moe_plan_schedule chose it); `schedule` names the body.
  MoeSchedule runs_as = MoeSchedule::interleaved;
  int wave_tiles = 0;     // expert-wave: L1 tiles a wave holds at least; 0: 2 x the grid
  double l2_share = 0;    // interleaved / model-guided: L2's share of the claimed work; 0: its share of all work
  int lag_tiles = 0;      // L1 tiles claimed past an expert's last before its L2 tiles may be claimed
};

struct MoeLayerOptions {
  MoeShape shape;
  int tokens_max = 0;                 // T_max per rank, >= 1
  MoeTile tile = MoeTile::automatic;  // m128n256 or m64n256 (automatic: by expected rows per expert)
  double timeout_s = 10;              // every cross-rank and dependency wait
  // Tests only, what the kernels after a failed wait do: the route publishes
  // its counts one run behind, so every dispatch wait times out; or the fused
  // kernel's wait record is set before it starts, as if one of its own waits
  // had timed out (its waits then give up at once).
  bool test_counts_never_come = false;
  bool test_expert_wait_fails = false;
};

// Throws xstage::Error naming the first option that the layer cannot run
// with P ranks (E divisible by P, hidden a multiple of 16, inter of 8,
// 1 <= topk <= E, tokens_max >= 1, tile m128n256 / m64n256 / automatic,
// timeout, 32-bit row and slot indices).
void validate_moe_layer_options(const MoeLayerOptions& o, int P);
// The shape's part of those checks (hidden, inter, experts over P ranks,
// top-k), for callers that have no options yet; `what` opens each message.
void validate_moe_layer_shape(const MoeShape& s, int P, const std::string& what);
// The tile the layer runs (MoeLayer::tile()): o.tile, or automatic: m64n256
// when the expected rows per expert (T_max * k * P / E) are at most 64, else m128n256.
MoeTile moe_layer_tile(const MoeLayerOptions& o, int P);

// Bytes a rank needs, from (T_max, k, hidden, inter, E, P) and the tile alone
// (validates first). Emulated ranks on one GPU need P times each.
struct MoeLayerSizes {
  int64_t rows_cap = 0;  // pool rows a rank may receive: P * T_max * min(k, E / P)
  // symmetric (placed as the world says; host placement: pinned host memory)
  size_t x_send = 0;     // bf16 [T_max, hidden]: the rank's tokens, read by the owners' pulls
  size_t routes = 0;     // int32 + fp32 [P][E/P][T_max]: each source's (token * k + slot) and weight per local expert
  size_t counts = 0;     // int32 [P][E/P]: each source's rows per local expert
  size_t combine = 0;    // bf16 [k][T_max][hidden]
  size_t flags = 0;      // uint64 [2P]: counts of each source, done of each expert rank
  // local (device memory of the rank's GPU)
  size_t pool_x = 0;     // bf16 [rows_cap, hidden] (the unfused baseline permutes L2's output into it)
  size_t pool_h = 0;     // bf16 [rows_cap, inter]
  size_t pool_out = 0;   // bf16 [rows_cap, hidden]: L2's local output (unfused, compute-only)
  size_t row_meta = 0;   // per pool row: weight, destination rank and slot, send-order index (4 x 4 B);
                         // per pair: topk ids, topk weights, index within its expert (3 x 4 B x T_max x k);
                         // offsets (E/P), send offsets (E + 1), T
  size_t weights = 0;    // bf16 w13 [E/P, 2 inter, hidden] + w2 [E/P, hidden, inter]
  size_t workspace = 0;  // claim counters, wait records, the per-tile trace
  size_t output = 0;     // bf16 [T_max, hidden]
  size_t symmetric_total() const { return x_send + routes + counts + combine + flags; }
  size_t local_total() const { return pool_x + pool_h + pool_out + row_meta + weights + workspace + output; }
};
MoeLayerSizes moe_layer_sizes(const MoeLayerOptions& o, int P);

// Per-tile trace of a fused run (MoeLayer::set_trace): times in ns from the
// launch's first tile start, per GEMM in claim order.
struct MoeTileTrace {
  int gemm = 0;  // 1 = L1, 2 = L2
  int sm = 0;
  double start_ns = 0, epilogue_ns = 0, end_ns = 0;
};

struct MoePhaseMs {
  double dispatch = 0, experts = 0, combine = 0;
};

class MoeLayer {
 public:
  // Validates (E divisible by P, hidden a multiple of 16, inter of 8, ...) and
  // checks that the sizes fit the GPU's free memory (and pinned host memory
  // for host placement) before allocating; throws xstage::Error with the
  // sizes and what is free. Collective (every rank constructs it; the
  // symmetric buffers live as long as the world).
  MoeLayer(World& world, const MoeLayerOptions& o);
  ~MoeLayer();
  MoeLayer(const MoeLayer&) = delete;
  MoeLayer& operator=(const MoeLayer&) = delete;

  const MoeLayerOptions& options() const;
  const MoeLayerSizes& sizes() const;
  int experts_per_rank() const;
  MoeTile tile() const;  // as resolved

  // Device buffers of a local rank, owned by the layer, filled by the caller
  // (finished before run(): the world's streams do not wait for other streams;
  // emulated ranks' w13 / w2 / topk arrays are slices of one allocation each):
  void* x(int rank);               // bf16 [T_max, hidden] (the symmetric send buffer)
  int32_t* topk_ids(int rank);     // int32 [T_max, k], global expert ids, distinct per token
  float* topk_weights(int rank);   // fp32 [T_max, k]
  void* w13(int rank);             // bf16 [E/P, 2 inter, hidden], gate/up interleaved
  void* w2(int rank);              // bf16 [E/P, hidden, inter]
  void set_tokens(int rank, int T);  // 0 <= T <= T_max; before run()

  // One run on the world's streams (asynchronous; fork/join around it is the caller's).
  // unfused synchronises once mid-run (the all-to-all's sizes go to the host,
  // as a torch user's split sizes do). compute-only runs the fused kernel
  // alone on the pool the last dispatch left (the first one after the layer
  // is made or set_tokens dispatches first, then waits for every rank); its
  // output is not meaningful.
  // plan: interleaved with lag_tiles 0 waits the GPU's SM count of L1 tiles.
  void run(MoeLayerVariant v, const MoeSchedulePlan& plan);
  // Fills every local rank's output, combine buffer, h and pool_out with NaN
  // bytes (asynchronous, on the ranks' streams), so that a check after the
  // next run sees any element that run did not write.
  void poison_outputs();
  // Synchronises; throws xstage::Error naming rank, flag and values if a wait
  // timed out (or a topk id was out of range or repeated). Collective under
  // nccl (every process calls it; all throw if one would), like the constructor.
  void check_waits();

  const void* output(int rank);    // bf16 [T, hidden]
  // After a run (synchronises): rows each local expert received, in expert order.
  std::vector<int> expert_rows(int rank);

  // Per-tile trace of the fused kernel (fused and compute-only runs). Emulated
  // ranks run as one launch: every rank of it returns the launch's trace.
  void set_trace(bool on);
  std::vector<MoeTileTrace> trace(int rank);  // of the last fused-kernel launch (synchronises)

  // Phase times of the last run on `rank`'s GPU stream, from events between
  // its kernels (synchronises): dispatch = route + pull; experts = the fused
  // kernel or the two GEMMs; combine = the combine kernel, and for unfused the
  // permute and the all-to-all before it. A phase the run did not have is 0.
  MoePhaseMs phase_ms(int rank);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace xstage
