// The values `accel launch --nnodes MIN:MAX` reads back from the launchers' store (cli/elastic_values.cpp), which
// come from the network: the input's first byte picks the range (the round's nodes up to MAX, a port, a round
// number, a join count), the rest is the value. Accepted values lie in their range; refusals are DATA_LOSS errors
// naming the key; texts for messages stay short and printable.
#include "cli/elastic_values.hpp"
#include "common/error.hpp"
#include "fuzz_common.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    if (size == 0) return 0;
    static const struct {
        const char *key;
        int min, max;
    } kRanges[] = {{"elastic/0/nodes", 1, 4}, {"elastic/0/port", 1, 65535}, {"elastic/round", 0, 1 << 30},
                   {"elastic/0/joined", 1, 1 << 20}, {"elastic/7/nodes", 1, 4096}};
    const auto &range = kRanges[data[0] % (sizeof kRanges / sizeof kRanges[0])];
    const std::string value(reinterpret_cast<const char *>(data + 1), size - 1);
    try {
        const int x = cli::store_int(range.key, value, range.min, range.max);
        if (x < range.min || x > range.max) fuzz::finding("accepted out of range: " + std::to_string(x));
    } catch (const Error &e) {
        if (e.code() != ACCEL_ERR_DATA_LOSS) fuzz::finding("unexpected status " + std::to_string(e.code()));
        if (std::string(e.what()).find(range.key) == std::string::npos) fuzz::finding("a refusal not naming its key");
        if (std::string(e.what()).size() > 700) fuzz::finding("a refusal message of unbounded length");
    }
    const std::string text = cli::store_text(value);
    if (text.size() > 303) fuzz::finding("a store text longer than 303 bytes");
    for (const char c : text)
        if (c < 0x20 || c >= 0x7f) fuzz::finding("a store text with an unprintable byte");
    return 0;
}
