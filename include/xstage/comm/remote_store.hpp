#pragma once
// The remote-store layer's choices, one definition for host and device code
// (src/device/remote/ uses these enums as template arguments; the host parses
// and prints them). Plain C++: no CUDA types.
#include <string>
#include <string_view>

namespace xstage {

// How a kernel's epilogue moves a staged output row to its destination rank
// (src/device/remote/send.cuh):
//   vector16       16-byte st.global.v4 from registers (write-back: L2 may keep
//                  host lines dirty); vector16-wt / vector16-cs: with the
//                  write-through / streaming cache operator;
//   bulk           TMA bulk copies of whole rows from shared memory;
//   paced          16-byte stores spread in slices over the next tile's
//                  mainloop (flags lagged or at exit);
//   paced-bulk, paced-warp  the same slices sent by a warp of a
//                  warp-specialised kernel's producer warpgroup, with TMA bulk
//                  copies or 16-byte stores (flags at exit; perf-log f11).
enum class StorePath { vector16, vector16_wt, vector16_cs, bulk, paced, paced_bulk, paced_warp };

// When a tile's completion flags are published (src/device/remote/publish.cuh):
// lagged (just before the CTA's next tile's stores, so the release fence finds
// the stores drained), eager (right after the stores: the fence then waits for
// them to drain, perf-log f1), at-exit (every flag of a CTA once it has no
// tiles left), coupled (after the tile's stores are remotely visible: the
// completion-coupled counterfactual).
enum class Completion { lagged, eager, at_exit, coupled };

std::string to_string(StorePath s);   // "vector16", "vector16-wt", ..., "paced-warp"
std::string to_string(Completion c);  // "lagged", "eager", "at-exit", "coupled"
// Throw xstage::Error naming the accepted words.
StorePath parse_store_path(std::string_view text);
Completion parse_completion(std::string_view text);
bool is_paced(StorePath s);  // paced, paced-bulk, paced-warp: sends in slices
}  // namespace xstage
