#pragma once
// Now, UTC, ISO 8601 ("2026-11-30T02:31:18Z"), for the provenance of results.
#include <string>

namespace xstage::detail {

std::string utc_now_iso();

}  // namespace xstage::detail
