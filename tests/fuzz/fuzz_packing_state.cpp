// A packed loader's dataset_state (src/data_loader/packing.*: decode_packing_state), read back from a
// checkpoint's dl_state_dict.bin: any bytes decode or fail with an accel::Error (DATA_LOSS); what decodes
// writes back to the same bytes.
#include "data_loader/packing.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string bytes(reinterpret_cast<const char *>(data), size);
    fuzz::current_input() = bytes;
    PackingState s;
    if (!fuzz::accepts([&] { s = decode_packing_state(bytes); })) return 0;
    if (encode_packing_state(s) != bytes) fuzz::finding("a decoded packing state does not write back to its bytes");
    return 0;
}
