// What accel_model_from_pretrained reads before any weights: config.json (spec_from_hf_config, then the spec it
// makes through parse_model_spec, as from_pretrained builds it), the options JSON (whose "frozen" / "lora" are
// handed into a spec), and model.safetensors.index.json (index_weight_map, from a file as the loader reads it).
// Each input is tried as all three.
#include "checkpointing/merge_weights.hpp"
#include "config/model_spec.hpp"
#include "config/pretrained_config.hpp"
#include "fuzz_common.hpp"

#include <cstdio>
#include <unistd.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    std::string spec;
    if (fuzz::accepts([&] { spec = config::spec_from_hf_config(text, "config.json", {}); }))
        fuzz::accepts([&] { config::parse_model_spec(spec.c_str()); });

    config::FromPretrainedOptions options;
    if (fuzz::accepts([&] { options = config::parse_from_pretrained_options(text.c_str(), "options_json"); })) {
        const std::string gpt2 = "{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 8, \"n_head\": 2}";
        if (fuzz::accepts([&] { spec = config::spec_from_hf_config(gpt2, "config.json", options.model_options); }))
            fuzz::accepts([&] { config::parse_model_spec(spec.c_str()); });
    }

    char path[] = "/tmp/accel-fuzz-index-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return 0;
    const bool written = write(fd, data, size) == static_cast<ssize_t>(size);
    close(fd);
    if (written) fuzz::accepts([&] { ckpt::index_weight_map(path); });
    unlink(path);
    return 0;
}
