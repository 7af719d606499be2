#pragma once
// Independent jobs on every core.
#include <cstddef>
#include <functional>

namespace xstage {

// Runs job(i) for i in [0, n) on every core. The jobs must be independent and
// each write its own result, so that the outcome does not depend on the
// thread count. The first exception a job throws is rethrown once all ended.
void parallel_for(size_t n, const std::function<void(size_t)>& job);

}  // namespace xstage
