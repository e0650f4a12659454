// Accelerate's device_map JSON (config::parse_device_map: accel_model_check_device_map, accel_model_dispatch) and
// infer_auto_device_map's options (max_memory with size texts, dtype, no_split_module_classes). The input is tried
// as both. A map that parses writes back to JSON that parses to the same map; options that parse are run through
// infer_auto_device_map on a small empty GPT-2 (tied head), whose map must cover the model.
#include "big_modeling/device_map.hpp"
#include "big_modeling/device_map_infer.hpp"
#include "config/device_map.hpp"
#include "fuzz_common.hpp"
#include "model/model.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    config::DeviceMap map;
    if (fuzz::accepts([&] { map = config::parse_device_map(text.c_str(), "device_map"); })) {
        const std::string again = config::device_map_to_json(map);
        config::DeviceMap back;
        if (!fuzz::accepts([&] { back = config::parse_device_map(again.c_str(), "device_map"); }) || back != map)
            fuzz::finding("a parsed device map does not read back: " + again);
    }
    static const std::shared_ptr<Model> model = make_model_from_json(
        R"({"type": "gpt", "vocab_size": 16, "n_positions": 4, "n_embd": 4, "n_layer": 2, "n_head": 1, "empty_init": true})");
    config::InferDeviceMapOptions options;
    if (!fuzz::accepts([&] { options = config::parse_infer_device_map_options(text.c_str(), "options_json"); })) return 0;
    if (!options.max_memory) return 0; // the machine's free memory: not the input's
    config::DeviceMap inferred;
    if (fuzz::accepts([&] { inferred = big_modeling::infer_auto_device_map(*model, options); }))
        if (!fuzz::accepts([&] { big_modeling::check_device_map(*model, inferred, "inferred"); }))
            fuzz::finding("an inferred map does not cover the model: " + config::device_map_to_json(inferred));
    return 0;
}
