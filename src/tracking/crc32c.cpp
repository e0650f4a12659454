#include "tracking/crc32c.hpp"

#include <array>

namespace accel::tracking {

namespace {
// Byte-wise table of the reflected Castagnoli polynomial 0x82F63B78, built once.
std::array<uint32_t, 256> make_table()
{
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[i] = c;
    }
    return t;
}
} // namespace

uint32_t crc32c(const void *data, size_t len)
{
    static const std::array<uint32_t, 256> table = make_table();
    const auto *p = static_cast<const unsigned char *>(data);
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < len; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void *data, size_t len)
{
    uint32_t c = crc32c(data, len);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

} // namespace accel::tracking
