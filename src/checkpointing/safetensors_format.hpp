// The safetensors file format at the byte level (no LibTorch): dtype names, header building with the
// reference writer's ordering and padding, and an untrusted-input header parser that validates a whole
// file's layout (shared/spec/checkpoint-format.md §9). The LibTorch side is safetensors.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {

// In the reference writer's sort order (BOOL smallest ... U64 largest).
enum class StDtype : int {
    BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
    I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64
};

const char *st_dtype_name(StDtype d);
int st_dtype_bits(StDtype d);
std::optional<StDtype> st_dtype_from_name(const std::string &name);

constexpr uint64_t kMaxHeaderBytes = 100000000; // the reference reader's cap

using StringMap = std::vector<std::pair<std::string, std::string>>;

struct StTensorInfo {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;
    uint64_t begin = 0; // relative to the data buffer
    uint64_t end = 0;
    uint64_t nbytes() const { return end - begin; }
};

struct StHeader {
    bool has_metadata = false;
    StringMap metadata;
    std::vector<StTensorInfo> tensors; // in header order
    uint64_t header_len = 0;           // N (JSON bytes including padding)
    uint64_t data_start() const { return 8 + header_len; }
    const StTensorInfo *find(const std::string &name) const;
};

// Parses and validates the layout of a complete file of `file_len` bytes whose first bytes are
// `file` (at least min(file_len, 8 + N) bytes must be readable). Every violation is
// accel::Error(ACCEL_ERR_DATA_LOSS) "<what>: tensor \"<name>\": <rule>".
StHeader parse_st_header(const uint8_t *file, uint64_t file_len, const std::string &what);

// One tensor to write: `nbytes` must equal numel x bits / 8.
struct StWriteEntry {
    std::string name;
    StDtype dtype = StDtype::F32;
    std::vector<uint64_t> shape;
    uint64_t nbytes = 0;
    const void *data = nullptr;
};

// Orders `entries` as the reference writer does (dtype descending, then name ascending), and returns
// the 8-byte length plus the space-padded compact JSON header; data then follows in that order.
// Throws INVALID_ARGUMENT on duplicate names or a size that does not match the shape.
std::string build_st_header(std::vector<StWriteEntry> &entries, const StringMap *metadata);

// Numel of a shape, with overflow reported as DATA_LOSS naming `what`.
uint64_t st_numel(const std::vector<uint64_t> &shape, const std::string &what);

} // namespace accel::ckpt
