// The model spec JSON (accel_model_create_from_json). Every spec is parsed; specs whose parameters fit in
// 1 MiB are also built through the C API (larger ones only exercise the size checks).
#include "config/model_spec.hpp"
#include "fuzz_common.hpp"
#include "parallel/tensor_parallel/sequential_plan.hpp"

#include <accel/model.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    config::ModelSpec spec;
    if (!fuzz::accepts([&] { spec = config::parse_model_spec(text.c_str()); })) return 0;
    // A sequential spec's tensor-parallel plan (its layers' and its top-level tp_plan entries) checked for tp 2 and 3,
    // as prepare checks it: refused by name or accepted, never a crash.
    if (!spec.gpt && !spec.llama) {
        std::vector<parallel::tp::SequentialLayer> layers;
        for (const auto &l : spec.layers)
            layers.push_back({l.type, l.tp_plan, l.in_features, l.out_features, l.nhead, l.dim_feedforward,
                              l.type == "transformer_encoder_layer" ? l.dropout : l.p});
        for (int64_t tp : {2, 3}) fuzz::accepts([&] { parallel::tp::plan_sequential(layers, spec.tp_plan, tp); });
    }
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
