// `accel launch --config_file` (and env, config update): Accelerate's config file reader
// (config::parse_cluster_config, yaml-cpp) on any bytes, and the integer check launch's flags go through.
// A bad file must be an accel::Error (INVALID_ARGUMENT / UNIMPLEMENTED naming file and key), nothing else.
#include "cli/launch_config.hpp"
#include "common/error.hpp"
#include "config/config_file.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const std::string text = accel::fuzz::text_of(data, size);
    for (const char *name : {"fuzz.yaml", "fuzz.json"}) {
        try {
            const auto cfg = accel::config::parse_cluster_config(text, name);
            if (cfg.num_processes == 0 || cfg.num_machines < 1 || cfg.machine_rank >= cfg.num_machines)
                accel::fuzz::finding("a config accepted with an impossible topology");
            // What accel writes back must read again (config update).
            accel::config::parse_cluster_config(cfg.yaml, "again.yaml");
        } catch (const accel::Error &e) {
            if (e.code() != ACCEL_ERR_INVALID_ARGUMENT && e.code() != ACCEL_ERR_UNIMPLEMENTED)
                accel::fuzz::finding(std::string("unexpected status: ") + e.what());
        }
    }
    if (auto v = accel::cli::parse_int_in(text, 0, 65535); v && (*v < 0 || *v > 65535))
        accel::fuzz::finding("an integer out of its range: " + text);
    return 0;
}
