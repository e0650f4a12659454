// The options JSON of accel_accelerator_get_state_dict (config::parse_get_state_dict_options), over a fixed
// unprepared model on one process: whatever is accepted ("unwrap", "rank0_only") gives all of its entries.
#include "fuzz_common.hpp"

#include <accel/accelerator.h>
#include <accel/checkpoint.h>
#include <accel/model.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static accel_accelerator_t *acc = nullptr;
    static accel_model_t *model = [] {
        accel_model_t *m = nullptr;
        if (accel_accelerator_create(nullptr, &acc) != ACCEL_OK ||
            accel_model_create_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}", &m) != ACCEL_OK)
            accel::fuzz::finding("cannot create the fixed accelerator and model");
        return m;
    }();
    const std::string text = accel::fuzz::text_of(data, size);
    accel_state_dict_t *sd = nullptr;
    if (accel::fuzz::status_ok(accel_accelerator_get_state_dict(acc, model, text.c_str(), &sd))) {
        size_t count = 0;
        accel::fuzz::status_ok(accel_state_dict_get_count(sd, &count));
        // One process is process 0 and has no wrapper: no option can drop or rename an entry.
        if (count != 2) accel::fuzz::finding("an accepted option changed the entries of an unprepared model");
    }
    accel_state_dict_free(sd);
    return 0;
}
