#pragma once
// What this build was made from, stamped into every result file.

namespace xstage {

// The commit (git, or -DXSTAGE_GIT_COMMIT=... for an exported tree). It lives in
// one generated source file, so a new commit rebuilds that file and nothing else.
const char* build_commit();

}  // namespace xstage
