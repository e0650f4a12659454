// The model spec JSON (accel_model_create_from_json). Every spec is parsed; specs whose parameters fit in
// 1 MiB are also built through the C API (larger ones only exercise the size checks).
#include "config/model_spec.hpp"
#include "fuzz_common.hpp"

#include <accel/model.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    config::ModelSpec spec;
    if (!fuzz::accepts([&] { spec = config::parse_model_spec(text.c_str()); })) return 0;
    if (spec.bytes > (1u << 20) || (spec.lora && spec.lora->r > 64)) return 0; // LoRA's A and B: r (in + out) each
    accel_model_t *model = nullptr;
    // "lora" target modules and "frozen" globs are matched against the built model's names: a spec may parse and
    // name modules the model lacks, refused when built with a message naming the key.
    if (!fuzz::status_ok(accel_model_create_from_json(text.c_str(), &model))) {
        const std::string msg = accel_last_error_message();
        if (msg.rfind("lora", 0) != 0 && msg.rfind("frozen", 0) != 0)
            fuzz::finding("a spec that parses is rejected when built: " + text);
    }
    accel_model_free(model);
    return 0;
}
