// CRC-32C (Castagnoli) and TFRecord's masked form. Debian 12 packages no C/C++ CRC-32C library
// (libcrc32c-dev is not in bookworm; abseil 20220623 predates absl/crc; protobuf keeps its copy
// internal), so this is the small table-driven version, checked against RFC 3720's test vectors.
#pragma once

#include <cstddef>
#include <cstdint>

namespace accel::tracking {

uint32_t crc32c(const void *data, size_t len);
// TFRecord's mask: ((crc >> 15) | (crc << 17)) + 0xa282ead8, so that a CRC of data holding CRCs stays
// well distributed.
uint32_t masked_crc32c(const void *data, size_t len);

} // namespace accel::tracking
