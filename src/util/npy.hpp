#pragma once
// A minimal .npy reader and writer (NumPy format versions 1.0, 2.0, 3.0):
// reads little-endian float32 or float16 arrays in C order into float32
// (and int32 or int64 ones, such as expert ids, exact up to 2^24),
// writes float32 in C order (version 1.0). Anything else is rejected with an
// xstage::Error naming the file and what was expected.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xstage {

struct NpyArray {
  std::vector<size_t> shape;
  std::vector<float> data;  // C order
  size_t size() const;      // product of shape (1 for a 0-d array)
};

NpyArray read_npy(const std::string& path);
// Parses a whole file's bytes; `where` names it in errors.
NpyArray parse_npy(const std::string& bytes, const std::string& where);

void write_npy(const std::string& path, const std::vector<size_t>& shape, const float* data);
std::string format_npy(const std::vector<size_t>& shape, const float* data);

// IEEE half -> float (exact).
float half_to_float(uint16_t h);

}  // namespace xstage
