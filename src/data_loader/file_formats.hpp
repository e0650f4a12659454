// The byte-level side of the file datasets (no LibTorch): element types of token and sample files, and a
// strict parser for NumPy .npy headers (untrusted input: every violation is an error naming the file).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel {

// Little-endian element types a data file may hold.
enum class ElemType { Bool, U8, I8, U16, I16, U32, I32, U64, I64, F16, BF16, F32, F64 };

size_t elem_size(ElemType t);
bool elem_is_integer(ElemType t);
// NumPy's names ("uint16", "float32", "bool"), as the "dtype" key takes them.
const char *elem_name(ElemType t);
std::optional<ElemType> elem_from_name(const std::string &name);

struct NpyHeader {
    ElemType type = ElemType::U8;
    std::vector<int64_t> shape; // () is a scalar
    uint64_t data_offset = 0;   // where the C-order array data begins
    uint64_t numel() const;
};

// The largest header accepted (numpy writes a few hundred bytes; its own reader refuses beyond 10 kB
// unless told otherwise).
constexpr size_t kMaxNpyHeaderBytes = 65536;

// Parses the header at the start of a .npy file of `file_size` bytes, given its first `len` bytes (at most
// kMaxNpyHeaderBytes + 12 are needed). Accepts format versions 1.0, 2.0 and 3.0 with the keys numpy
// writes (descr, fortran_order, shape), little-endian or byte-order-free descrs of ElemType; refuses
// fortran order, object / structured / big-endian dtypes, and a shape whose data does not fill the rest of
// the file exactly. Errors: accel::Error(ACCEL_ERR_DATA_LOSS, "<what>: <rule>"), except an unsupported but
// valid dtype or fortran order (ACCEL_ERR_UNIMPLEMENTED).
NpyHeader parse_npy_header(const uint8_t *bytes, size_t len, uint64_t file_size, const std::string &what);

} // namespace accel
