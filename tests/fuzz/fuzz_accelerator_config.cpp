// The accelerator's config JSON (accel_accelerator_create's config_json). Accepted configs must survive
// a round trip: the effective config it reports (accel_accelerator_get_config_json) parses to itself.
#include "config/accelerator_config.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    config::AcceleratorConfig cfg;
    if (!fuzz::accepts([&] { cfg = config::parse_accelerator_config(text.c_str()); })) return 0;
    const std::string once = config::to_json(cfg);
    config::AcceleratorConfig again;
    if (!fuzz::accepts([&] { again = config::parse_accelerator_config(once.c_str()); }))
        fuzz::finding("the effective config does not parse: " + once);
    if (config::to_json(again) != once) fuzz::finding("the effective config changes on a round trip: " + once);
    return 0;
}
