// A PEFT adapter_config.json (accel_model_from_pretrained's "adapter" option, src/config/lora_config.cpp).
#include "config/lora_config.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    config::LoraConfig c;
    if (!fuzz::accepts([&] { c = config::parse_peft_adapter_config(text, "adapter_config.json"); })) return 0;
    // What is accepted is a usable configuration.
    if (c.r < 1 || !(c.lora_alpha > 0.0) || c.lora_dropout < 0.0 || c.lora_dropout >= 1.0 || !c.targets_given)
        fuzz::finding("an adapter config accepted with unusable values: " + text);
    return 0;
}
