// Accelerate's config file (what `accelerate config` writes, ClusterConfig): YAML, or JSON when the
// name ends in ".json", read with yaml-cpp. One reader for `accel launch`, `env`, `test` and
// `estimate-memory`. Keys accel implements take effect; keys that only steer Accelerate's own
// launchers (TPU, SageMaker notebooks, dynamo, ...) and do not apply here become warnings naming the
// key; a key whose setting would silently change training (FSDP/DeepSpeed as distributed_type, an
// unsupported FP8 backend, an mpirun hostfile) is an error naming the file and the key.
//
// parse_cluster_config works on a buffer (no file system access), so it can be fuzzed alone.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::config {

struct ClusterConfig {
    std::string source;                      // file name used in messages
    std::string compute_environment = "LOCAL_MACHINE";
    std::string distributed_type;            // required: NO, MULTI_CPU, MULTI_GPU, ...
    std::string mixed_precision = "no";      // no, fp16, bf16, fp8
    bool use_cpu = false;
    bool debug = false;
    bool enable_cpu_affinity = false;        // accel launch --enable_cpu_affinity
    int num_processes = -1;                  // -1: not given
    int machine_rank = 0;
    int num_machines = 1;
    std::optional<std::string> gpu_ids;      // CUDA_VISIBLE_DEVICES unless "all"
    std::optional<std::string> main_process_ip;
    std::optional<int> main_process_port;
    // Not an Accelerate top-level key: accel's own extension (older accel files) kept working.
    std::optional<int> gradient_accumulation_steps;
    // ACCELERATE_FP8_* variables from fp8_config (only with mixed_precision fp8), as `accelerate launch`
    // exports them from the --fp8_* flags.
    std::map<std::string, std::string> fp8_env;
    // distributed_type FSDP / DEEPSPEED: "fsdp" / "deepspeed" ("" otherwise), and the variables `accelerate
    // launch` exports from fsdp_config / deepspeed_config (FSDP_*, ACCELERATE_DEEPSPEED_*, ...; the library
    // reads and checks them when the accelerator is created).
    std::string sharding;
    std::map<std::string, std::string> sharding_env;
    // deepspeed_config's keys in the file's order, whatever distributed_type is, and whether the file gives
    // mixed_precision: Accelerate's DeepSpeed launcher exports them as ACCELERATE_CONFIG_DS_FIELDS.
    std::vector<std::string> deepspeed_fields;
    bool mixed_precision_given = false;
    // ACCELERATE_DYNAMO_* from dynamo_config, as `accelerate launch` exports them (the launcher sets its
    // defaults for the others). libaccel runs "NO", "EAGER" and "OFI" and refuses the others (config/dynamo.hpp).
    std::map<std::string, std::string> dynamo_env;
    // parallelism_config: PARALLELISM_CONFIG_* and ACCELERATE_USE_PARALLELISM_CONFIG=true, as `accelerate launch`
    // exports them from its --parallelism_config_* flags (empty when the file has no such section).
    std::map<std::string, std::string> parallelism_env;
    // distributed_type MEGATRON_LM (`accelerate launch --use_megatron_lm`), and megatron_lm_config's values as
    // the launcher exports them (MEGATRON_LM_*, config/megatron_lm_launch.hpp), read whatever distributed_type is:
    // Accelerate applies the section with --use_megatron_lm too.
    bool megatron_lm = false;
    std::map<std::string, std::string> megatron_lm_env;
    // Keys read but without effect here, each "key: why" (printed as warnings by the commands).
    std::vector<std::string> warnings;
    // Every top-level key with Accelerate's defaults filled in, values as YAML flow text, sorted by key
    // (what `accel env` prints and `accel config update` writes).
    std::vector<std::pair<std::string, std::string>> entries;
    // The whole configuration as YAML in Accelerate's layout (sorted keys, empty sections left out).
    std::string yaml;
};

// The sharding settings of `accelerate launch`: a flag --NAME (also the key NAME of fsdp_config /
// deepspeed_config) and the environment variable it becomes. Launch-only DeepSpeed keys have env null.
struct ShardingSetting {
    const char *name;
    const char *env;
    bool fsdp;  // else DeepSpeed
    bool lower; // exported lower-cased, as Accelerate's launcher does
};
const std::vector<ShardingSetting> &sharding_settings();
const ShardingSetting *find_sharding_setting(const std::string &name);

// A setting's value as the variable's text (lower-cased where Accelerate's launcher lower-cases it).
std::string sharding_env_text(const ShardingSetting &setting, const std::string &value);

// Accelerate 1.x's questionnaire, for fsdp_version 1, writes the sharding strategy (FULL_SHARD, ...) under
// fsdp_reshard_after_forward, and its FSDP plugin reads it as the strategy there; accel's library takes the
// strategy from FSDP_SHARDING_STRATEGY (FSDP_RESHARD_AFTER_FORWARD is a version 2 switch). Moves such a
// value (not a boolean) to FSDP_SHARDING_STRATEGY unless that is set.
void fsdp_env_for_library(std::map<std::string, std::string> &env);

// Parses a config file's text. `file_name` picks the syntax (".json": JSON, otherwise YAML; JSON is
// read by the same YAML parser, of which it is a subset) and names the file in messages. Throws
// accel::Error(ACCEL_ERR_INVALID_ARGUMENT / ACCEL_ERR_UNIMPLEMENTED) naming the file and the key.
ClusterConfig parse_cluster_config(const std::string &text, const std::string &file_name);

// Reads and parses a file (ACCEL_ERR_NOT_FOUND when it cannot be read).
ClusterConfig load_cluster_config(const std::string &path);

// $HF_HOME/accelerate/default_config.yaml, HF_HOME defaulting to $XDG_CACHE_HOME/huggingface and
// XDG_CACHE_HOME to ~/.cache, as Accelerate's config_args.py.
std::string default_config_file();

// Which file a command reads: the explicit --config_file, else ACCELERATE_CONFIG_FILE, else the default
// file when it exists; nullopt when there is none.
std::optional<std::string> resolve_config_file(const std::optional<std::string> &flag);

// The YAML text of a configuration given as (key, YAML flow value) pairs, keys sorted, values as
// written (for `accel config`, whose answers are already YAML scalars).
std::string emit_yaml(const std::vector<std::pair<std::string, std::string>> &entries);

// The same configuration as JSON with 2-space indents and sorted keys (Accelerate's to_json_file, used
// for files whose name ends in ".json" and by `accel config default`). `yaml_text` is a ClusterConfig's
// `yaml` or emit_yaml's output.
std::string yaml_to_json(const std::string &yaml_text);

} // namespace accel::config
