#pragma once
// Attention forward on the GPU: O = softmax(scale * Q K^T) V per (batch, head),
// non-causal, bf16 in and out, fp32 accumulation (kernel: src/device/attention/,
// design: docs/design/attention.md).
//
// Layout [B, S, H, D] for Q, K, V and O, given as element strides for B, S and
// H (the D stride is 1). Q has S_q rows, K and V S_kv rows; neither needs to be
// a multiple of any tile. Requirements (checked, with a message naming the
// argument): D in {64, 128}; B, H, S_q, S_kv >= 1; device pointers 16-byte
// aligned; every stride a positive multiple of 8 elements.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

namespace xstage {

struct AttentionStrides {  // in elements
  int64_t b = 0, s = 0, h = 0;
};

// Which kernel runs (src/device/attention/): `automatic` picks the default for
// the head dim (attention_default_kernel); the others force one, for
// comparisons and tests.
enum class AttentionKernel : int {
  automatic = 0,
  mma_sync = 1,         // sm90_bf16_attention_fwd: FlashAttention-2 structure on mma.sync
  wgmma_basic = 2,      // sm90_bf16_attention_fwd_wgmma: TMA + wgmma, GEMMs and softmax in sequence
  wgmma_overlap = 3,    //   softmax of S_j while O += P_{j-1} V_{j-1} runs
  wgmma_pingpong = 4,   //   and the two consumer warpgroups take turns on the tensor cores
  wgmma_n192 = 5,       //   ping-pong with 192-key tiles (D = 64 only)
  wgmma_m192 = 6,       //   three consumer warpgroups, 192 query rows a tile, ping-pong (D = 64 only)
  wgmma_m192_overlap = 7,  //   the same without ping-pong (D = 64 only)
};

// "auto", "mma", "wgmma-basic", "wgmma-overlap", "wgmma-pingpong", "wgmma-n192",
// "wgmma-m192", "wgmma-m192-overlap"
// ("wgmma": wgmma-pingpong); throws xstage::Error for anything else.
AttentionKernel parse_attention_kernel(const std::string& name);
std::string to_string(AttentionKernel k);
// The kernel `automatic` resolves to for head dim D.
AttentionKernel attention_default_kernel(int D);

struct AttentionForwardArgs {
  int B = 0, H = 0, S_q = 0, S_kv = 0, D = 0;
  float scale = NAN;  // softmax scale; NaN: 1/sqrt(D)
  const void* q = nullptr;  // bf16 device pointers
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  AttentionStrides q_stride, k_stride, v_stride, o_stride;
  float* lse = nullptr;  // optional fp32 [B, H, S_q] (natural log of the row sum of exp(scale * q.k))
  AttentionKernel kernel = AttentionKernel::automatic;
};

// Contiguous [B, S, H, D] strides.
AttentionStrides contiguous_bshd(int S, int H, int D);

// The scale the kernel uses: args.scale, or 1/sqrt(D) when it is NaN.
float effective_scale(const AttentionForwardArgs& a);

// Throws xstage::Error ("attention: <what>: expected <...>, got <...>") on
// the first bad argument. Touches no GPU; `check_pointers` = false skips the
// pointer checks (shape-only validation for the CLI before allocating).
void validate_attention_args(const AttentionForwardArgs& a, bool check_pointers = true);

// Validates, then launches on `stream` (asynchronous). Throws xstage::Error
// on invalid arguments or a launch failure.
void attention_forward(const AttentionForwardArgs& a, cudaStream_t stream = nullptr);

// Describes the kernel picked for head dim D: "sm90_bf16_attention_fwd<D=128> BLOCK_M=128 ...".
std::string attention_kernel_name(int D, AttentionKernel k = AttentionKernel::automatic);

// ---- CPU reference (fp64 accumulation), for checks
// q, k, v: float [B, S, H, D] contiguous (the values the kernel sees, i.e.
// already rounded to bf16). Computes one output row (b, s, h) into out[0..D)
// and returns its natural-log log-sum-exp.
struct AttentionReference {
  int B = 0, H = 0, S_q = 0, S_kv = 0, D = 0;
  double scale = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  double row(int b, int s, int h, double* out) const;
};

// ---- bf16 on the host (round to nearest even; NaN stays NaN)
uint16_t float_to_bf16(float f);
float bf16_to_float(uint16_t h);

}  // namespace xstage
