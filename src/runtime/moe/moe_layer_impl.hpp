#pragma once
// MoeLayer's state (include/xstage/moe/moe_layer.hpp), shared by its source files:
// moe_layer.cpp (buffers, fit check, accessors), moe_layer_run.cpp (the
// variants' kernels and copies), moe_layer_report.cpp (waits, trace, phases).
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <vector>

#include "device/moe/layer_comm_params.hpp"
#include "device/remote/flag_timeout_record.hpp"
#include "runtime/moe/moe_device_ids.hpp"
#include "runtime/moe/moe_layer_launch.hpp"
#include "xstage/comm/world.hpp"
#include "xstage/moe/moe_layer.hpp"

namespace xstage {

struct MoeLayer::Impl {
  // The ranks one GPU runs as one launch: every rank of an emulated world,
  // else one. Private arrays are packed rank after rank (index li = rank - rank0).
  struct Group {
    int rank0 = 0, n = 1, device = 0, sms = 0;
    cudaStream_t stream = nullptr;
    uint16_t *w13 = nullptr, *w2 = nullptr;                         // [n][E_loc][2I][H], [n][E_loc][H][I]
    uint16_t *pool_x = nullptr, *h = nullptr, *pool_out = nullptr;  // [n * rows_cap][H | I | H]
    uint16_t* out = nullptr;                                        // [n][T_max][H]
    int32_t *offs = nullptr, *row_dest_rank = nullptr, *row_dest_slot = nullptr, *row_perm = nullptr;
    float* row_weight = nullptr;
    int32_t *topk_ids = nullptr, *pos = nullptr, *send_base = nullptr, *tokens = nullptr;
    float* topk_weights = nullptr;
    int32_t *route_done = nullptr, *counters = nullptr;
    int32_t* pull_plan = nullptr;  // [2 (n E_loc P + 1)]: the pull's segment starts (dispatch_pull.cu)
    remote::FlagTimeoutRecord* records = nullptr;  // [kWaitCount]
    moe::RouteInputError* input_error = nullptr;
    uint64_t* trace = nullptr;  // [2][trace_tiles][4]
    int64_t trace_tiles = 0;
    // The unfused baseline's sizes on the host (pinned): every rank's counts
    // [n][P * E_loc] and send offsets [n][E + 1].
    int32_t *host_counts = nullptr, *host_send_base = nullptr;
    cudaEvent_t counts_ready = nullptr, permuted = nullptr;
    std::array<cudaEvent_t, 4> phase{};  // timing: before dispatch, after it, after the experts, after the combine
    bool phase_ran[3] = {false, false, false};
  };

  World& w;
  MoeLayerOptions o;
  MoeLayerSizes z;
  MoeTile tile;
  int P, E, E_loc, k, H, I, T_max;
  int64_t rows_cap;
  const SymmetricBuffer *x_send = nullptr, *routes = nullptr, *counts = nullptr, *combine = nullptr, *flags = nullptr;
  std::vector<Group> groups;
  std::vector<int> tokens;          // [P]: T of each local rank
  std::vector<cudaEvent_t> copied;  // [P]: unfused, after rank r's copies (local ranks)
  uint64_t epoch = 0;
  bool dispatched = false, tracing = false, traced = false;
  bool pool_rows_valid = false;  // pool_x holds the last dispatch's rows (an unfused run reuses it)
  std::vector<std::pair<int, void*>> device_mem;  // freed with the layer
  std::vector<void*> host_mem;

  Impl(World& world, const MoeLayerOptions& options);
  ~Impl();
  void init();              // the constructor's work
  void release() noexcept;  // frees what init made so far (the destructor, or init throwing)

  Group& group_of(int rank);
  int local_in_group(int rank) { return rank - group_of(rank).rank0; }
  template <class T>
  T* alloc(int device, size_t count);

  // moe_layer_run.cpp
  // g's pointers and the world's tables, for the launch sequence shared
  // with the caller-owned path (moe_layer_launch.hpp).
  MoeLayerLaunch launch_of(Group& g);
  void run(MoeLayerVariant v, const MoeSchedulePlan& plan);
  // copy_rows false: the plan only; the fused kernel copies the rows itself.
  void dispatch(Group& g, bool copy_rows = true);
  void experts_fused(Group& g, const MoeSchedulePlan& plan, bool remote);
  void experts_unfused(Group& g);
  void permute_unfused(Group& g);
  void exchange_unfused();
  void combine_rows(Group& g, bool fused);
};

}  // namespace xstage
