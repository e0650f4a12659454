// config/config_file: Accelerate's config files (YAML and JSON) read with yaml-cpp: defaults, types,
// keys that take effect, warnings for keys that do not apply, errors naming file and key.
#include "common/error.hpp"
#include "config/config_file.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using accel::Error;
using accel::config::ClusterConfig;
using accel::config::parse_cluster_config;

namespace {

// The message of the error parsing `text` raises, or "" when it parses.
std::string error_of(const std::string &text, const std::string &name = "cfg.yaml", accel_status_t *code = nullptr)
{
    try {
        parse_cluster_config(text, name);
    } catch (const Error &e) {
        if (code) *code = e.code();
        return e.what();
    }
    return "";
}

bool has_warning(const ClusterConfig &c, const std::string &key)
{
    for (const auto &w : c.warnings)
        if (w.rfind(key + ":", 0) == 0) return true;
    return false;
}

} // namespace

TEST(ConfigFile, ReadsAccelerateYamlAndFillsDefaults)
{
    // As `accelerate config` writes it (mixed_precision quoted: PyYAML would read a bare no as false).
    ClusterConfig c = parse_cluster_config("compute_environment: LOCAL_MACHINE\n"
                                           "debug: false\n"
                                           "distributed_type: MULTI_CPU\n"
                                           "machine_rank: 0\n"
                                           "main_process_ip: 10.0.0.1\n"
                                           "main_process_port: 29501\n"
                                           "mixed_precision: 'bf16'\n"
                                           "num_machines: 2\n"
                                           "num_processes: 4\n"
                                           "rdzv_backend: static\n"
                                           "same_network: true\n"
                                           "use_cpu: true\n",
                                           "a.yaml");
    EXPECT_EQ(c.distributed_type, "MULTI_CPU");
    EXPECT_EQ(c.mixed_precision, "bf16");
    EXPECT_EQ(c.num_processes, 4);
    EXPECT_EQ(c.num_machines, 2);
    EXPECT_EQ(*c.main_process_ip, "10.0.0.1");
    EXPECT_EQ(*c.main_process_port, 29501);
    EXPECT_TRUE(c.use_cpu);
    EXPECT_TRUE(c.warnings.empty());
    // ClusterConfig's defaults are filled in, keys sorted, strings that YAML 1.1 would misread quoted.
    EXPECT_NE(c.yaml.find("main_training_function: main\n"), std::string::npos) << c.yaml;
    EXPECT_NE(c.yaml.find("tpu_use_sudo: false\n"), std::string::npos) << c.yaml;
    EXPECT_NE(c.yaml.find("mixed_precision: bf16\n"), std::string::npos) << c.yaml;
    EXPECT_LT(c.yaml.find("compute_environment"), c.yaml.find("debug"));
    ClusterConfig no = parse_cluster_config("distributed_type: 'NO'\nmixed_precision: 'no'\n", "b.yaml");
    EXPECT_NE(no.yaml.find("distributed_type: 'NO'\n"), std::string::npos) << no.yaml;
    EXPECT_NE(no.yaml.find("mixed_precision: 'no'\n"), std::string::npos) << no.yaml;
    EXPECT_EQ(no.num_processes, -1);
    // A bare `no` (PyYAML: false) means "no", as Accelerate converts it.
    EXPECT_EQ(parse_cluster_config("distributed_type: 'NO'\nmixed_precision: false\n", "c.yaml").mixed_precision, "no");
}

TEST(ConfigFile, ReadsJsonAsAccelerateWritesIt)
{
    ClusterConfig c = parse_cluster_config("{\n  \"compute_environment\": \"LOCAL_MACHINE\",\n  \"debug\": false,\n"
                                           "  \"distributed_type\": \"NO\",\n  \"mixed_precision\": \"fp16\",\n"
                                           "  \"num_processes\": 1,\n  \"use_cpu\": true\n}\n",
                                           "default_config.json");
    EXPECT_EQ(c.distributed_type, "NO");
    EXPECT_EQ(c.mixed_precision, "fp16");
    EXPECT_EQ(c.num_processes, 1);
    // and writes it back as JSON with 2-space indents and sorted keys
    std::string json = accel::config::yaml_to_json(c.yaml);
    EXPECT_EQ(json.rfind("{\n  \"compute_environment\": \"LOCAL_MACHINE\",\n  \"debug\": false,\n", 0), 0u) << json;
    EXPECT_NE(json.find("\"num_processes\": 1,"), std::string::npos) << json;
    EXPECT_EQ(parse_cluster_config(json, "again.json").yaml, c.yaml);
}

TEST(ConfigFile, ErrorsNameTheFileAndTheKey)
{
    accel_status_t code = ACCEL_OK;
    // fuzz_launch_config's finding: a document that is not a mapping and holds a map with a null key was quoted
    // back by looking values up by key text, which threw yaml-cpp's InvalidNode out of the reader.
    EXPECT_NE(error_of(std::string("- :\n\x1c", 5), "n.yaml", &code).find("n.yaml: expected a mapping of keys"),
              std::string::npos);
    EXPECT_EQ(code, ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(error_of("debug: false\n", "x.yaml", &code).find("x.yaml: distributed_type: missing"), std::string::npos);
    EXPECT_EQ(code, ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(error_of("distributed_type: NO\nnum_processes: two\n").find("cfg.yaml: num_processes: expected an integer"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nuse_cpu: 'maybe'\n").find("cfg.yaml: use_cpu: expected true or false"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nuse_cpu: 'maybe'\n").find("got maybe"), std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nmixed_precision: fp32\n").find("mixed_precision: expected one of no, fp16"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nnum_procesess: 2\n").find("cfg.yaml: num_procesess: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nfp8_config:\n  margn: 1\n").find("fp8_config.margn: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: [1\n").find("not valid YAML"), std::string::npos);
    EXPECT_NE(error_of("{\"distributed_type\": \"NO\"", "c.json").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of("- a\n- b\n").find("expected a mapping"), std::string::npos);
    EXPECT_NE(error_of("").find("an empty document"), std::string::npos);
    EXPECT_NE(error_of("distributed_type: NO\nnum_machines: 2\nmachine_rank: 2\n").find("machine_rank: 2 is not below"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: NO\ndebug: true\ndebug: false\n").find("debug: the key appears twice"),
              std::string::npos);
    EXPECT_NE(error_of(std::string("distributed_type: NO\n\0", 22)).find("NUL"), std::string::npos);
    // Settings that would silently change training are errors, not warnings.
    code = ACCEL_OK;
    EXPECT_NE(error_of("distributed_type: XLA\n", "f.yaml", &code).find("f.yaml: distributed_type: XLA is not yet supported"),
              std::string::npos);
    EXPECT_EQ(code, ACCEL_ERR_UNIMPLEMENTED);
    code = ACCEL_OK; // Accelerate 0.x's name for XLA
    EXPECT_NE(error_of("distributed_type: TPU\n", "f.yaml", &code).find("f.yaml: distributed_type: TPU is not yet supported"),
              std::string::npos);
    EXPECT_EQ(code, ACCEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(error_of("distributed_type: NO\nipex_config:\n  ipx: true\n").find("ipex_config.ipx: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: NO\ndynamo_config:\n  dynamo_use_dynamic: sometimes\n")
                  .find("dynamo_config.dynamo_use_dynamic: expected true or false"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_stratgy: FULL_SHARD\n")
                  .find("fsdp_config.fsdp_sharding_stratgy: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: FSDP\nfsdp_config:\n  zero_stage: 3\n").find("fsdp_config.zero_stage: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_moe_layer_cls_names: Expert\n")
                  .find("mixture-of-experts"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: FSDP\nparallelism_config:\n  parallelism_config_dp_size: 2\n")
                  .find("parallelism_config.parallelism_config_dp_size: unknown key"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: MULTI_CPU\nmpirun_config:\n  mpirun_hostfile: /h\n").find("mpirun_config.mpirun_hostfile"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: NO\nmixed_precision: fp8\nfp8_config:\n  backend: MSAMP\n").find("fp8_config.backend"),
              std::string::npos);
    EXPECT_NE(error_of("distributed_type: NO\ncompute_environment: AMAZON_SAGEMAKER\n").find("AMAZON_SAGEMAKER"),
              std::string::npos);
}

TEST(ConfigFile, KeysThatDoNotApplyAreWarnings)
{
    ClusterConfig c = parse_cluster_config("distributed_type: MULTI_CPU\nrdzv_backend: c10d\nenable_cpu_affinity: true\n"
                                           "fsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\n"
                                           "dynamo_config:\n  dynamo_backend: INDUCTOR\ntpu_name: t\n"
                                           "main_training_function: train\n",
                                           "w.yaml");
    for (const char *k : {"rdzv_backend", "fsdp_config", "dynamo_config.dynamo_backend", "tpu_name", "main_training_function"})
        EXPECT_TRUE(has_warning(c, k)) << k;
    // enable_cpu_affinity is applied by accel launch (each local process pinned to its own CPUs): no warning.
    EXPECT_FALSE(has_warning(c, "enable_cpu_affinity"));
    EXPECT_TRUE(c.enable_cpu_affinity);
    // kept in the normalized file (update keeps them)
    EXPECT_NE(c.yaml.find("fsdp_sharding_strategy: FULL_SHARD"), std::string::npos) << c.yaml;
    // defaults are not reported
    EXPECT_TRUE(parse_cluster_config("distributed_type: NO\nrdzv_backend: static\ndynamo_config:\n  dynamo_backend: 'NO'\n",
                                     "d.yaml")
                    .warnings.empty());
    // dynamo backends (config/dynamo.hpp): "eager" and "ofi" run in libaccel (no warning), a compiling backend is
    // exported with a warning that libaccel refuses it, an unknown name is an error naming the key.
    EXPECT_TRUE(parse_cluster_config("distributed_type: NO\ndynamo_config:\n  dynamo_backend: eager\n", "e.yaml")
                    .warnings.empty());
    EXPECT_TRUE(parse_cluster_config("distributed_type: NO\ndynamo_config:\n  dynamo_backend: OFI\n", "o.yaml")
                    .warnings.empty());
    EXPECT_NE(error_of("distributed_type: NO\ndynamo_config:\n  dynamo_backend: turbo\n")
                  .find("cfg.yaml: dynamo_config.dynamo_backend: expected one of Accelerate's dynamo backends"),
              std::string::npos);
}

TEST(ConfigFile, Fp8SectionBecomesAccelerateFp8Variables)
{
    ClusterConfig c = parse_cluster_config("distributed_type: NO\nmixed_precision: fp8\nfp8_config:\n  backend: TE\n"
                                           "  fp8_format: E4M3\n  margin: 2\n  interval: 3\n  amax_history_length: 16\n"
                                           "  amax_compute_algorithm: max\n  use_autocast_during_eval: true\n"
                                           "  override_linear_precision: [false, true, false]\n",
                                           "fp8.yaml");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_FORMAT"), "E4M3");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_MARGIN"), "2");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_INTERVAL"), "3");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_AMAX_HISTORY_LEN"), "16");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_AMAX_COMPUTE_ALGO"), "max");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL"), "true");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_OVERRIDE_DGRAD"), "true");
    EXPECT_EQ(c.fp8_env.at("ACCELERATE_FP8_OVERRIDE_FPROP"), "false");
    // without fp8 the section is reported and exports nothing
    ClusterConfig off = parse_cluster_config("distributed_type: NO\nfp8_config:\n  margin: 2\n", "fp8.yaml");
    EXPECT_TRUE(off.fp8_env.empty());
    EXPECT_TRUE(has_warning(off, "fp8_config"));
}

TEST(ConfigFile, LegacyKeysAreConverted)
{
    ClusterConfig c = parse_cluster_config("distributed_type: NO\nfp16: true\ndynamo_backend: 'NO'\n", "old.yaml");
    EXPECT_EQ(c.mixed_precision, "fp16");
    EXPECT_NE(c.yaml.find("dynamo_config:\n  dynamo_backend: 'NO'"), std::string::npos) << c.yaml;
    EXPECT_EQ(c.yaml.find("fp16:"), std::string::npos) << c.yaml;
}

// distributed_type FSDP / DEEPSPEED: the engine section becomes the launcher's variables (lists comma-joined);
// the other engine's section is ignored with a warning; launch-only DeepSpeed keys are warnings.
TEST(ConfigFile, ShardingSectionsBecomeTheLaunchersVariables)
{
    ClusterConfig c = parse_cluster_config(
        "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n"
        "  fsdp_transformer_layer_cls_to_wrap: [linear, gpt_block]\n  fsdp_sync_module_states: true\n"
        "  fsdp_min_num_params: 100\ndeepspeed_config:\n  zero_stage: 3\n",
        "f.yaml");
    EXPECT_EQ(c.sharding, "fsdp");
    EXPECT_EQ(c.sharding_env.at("FSDP_SHARDING_STRATEGY"), "SHARD_GRAD_OP");
    EXPECT_EQ(c.sharding_env.at("FSDP_TRANSFORMER_CLS_TO_WRAP"), "linear,gpt_block");
    EXPECT_EQ(c.sharding_env.at("FSDP_SYNC_MODULE_STATES"), "true");
    EXPECT_EQ(c.sharding_env.at("FSDP_MIN_NUM_PARAMS"), "100");
    EXPECT_EQ(c.sharding_env.count("ACCELERATE_DEEPSPEED_ZERO_STAGE"), 0u);
    ASSERT_EQ(c.warnings.size(), 1u);
    EXPECT_EQ(c.warnings[0], "deepspeed_config: ignored: distributed_type is FSDP, not DEEPSPEED");

    ClusterConfig d = parse_cluster_config(
        "distributed_type: DEEPSPEED\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 2\n  gradient_clipping: 1.0\n"
        "  gradient_accumulation_steps: 4\n  offload_optimizer_device: none\n  deepspeed_hostfile: /etc/hosts\n",
        "d.yaml");
    EXPECT_EQ(d.sharding, "deepspeed");
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_DEEPSPEED_ZERO_STAGE"), "2");
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_GRADIENT_CLIPPING"), "1.0");
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"), "4");
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE"), "none");
    ASSERT_EQ(d.warnings.size(), 1u);
    EXPECT_NE(d.warnings[0].find("deepspeed_config.deepspeed_hostfile: does not apply"), std::string::npos);
}

// Values Accelerate's questionnaires (0.24.1 and 1.x) write that are not YAML booleans or upper-case names, read as
// Accelerate's loader and launcher read them (tests/cli/test_accelerate_real.py runs the real 0.24.1 writer).
TEST(ConfigFile, AcceleratesOwnValuesAreUnderstood)
{
    // str_to_bool's words where a boolean is expected; mixed_precision lower-cased as the launcher does.
    ClusterConfig c = parse_cluster_config("distributed_type: MULTI_CPU\nuse_cpu: 'yes'\ndebug: 'NO'\nsame_network: 'On'\n"
                                           "mixed_precision: 'BF16'\n",
                                           "b.yaml");
    EXPECT_TRUE(c.use_cpu);
    EXPECT_FALSE(c.debug);
    EXPECT_EQ(c.mixed_precision, "bf16");
    // 0.24.1 writes downcast_bf16: 'no' and tpu_env: [] in every file: no warning; a value asking for a TPU warns.
    ClusterConfig t = parse_cluster_config("distributed_type: 'NO'\ndowncast_bf16: 'no'\ntpu_env: []\ntpu_use_sudo: false\n"
                                           "ipex_config:\n  ipex: false\n",
                                           "t.yaml");
    EXPECT_TRUE(t.warnings.empty()) << t.warnings[0];
    ClusterConfig w = parse_cluster_config("distributed_type: 'NO'\ndowncast_bf16: 'yes'\ntpu_use_sudo: 'sudo'\n"
                                           "tpu_env: [A=1]\nipex_config:\n  ipex: true\n",
                                           "w.yaml");
    for (const char *k : {"downcast_bf16", "tpu_use_sudo", "tpu_env", "ipex_config.ipex"}) EXPECT_TRUE(has_warning(w, k)) << k;
    // enable_cpu_affinity (1.x) is written back only when the file has it: 0.24.1's loader refuses the key.
    EXPECT_EQ(t.yaml.find("enable_cpu_affinity"), std::string::npos) << t.yaml;
    // dynamo_config as the launcher exports it: backend upper-cased, booleans as Python's str(bool).
    ClusterConfig d = parse_cluster_config("distributed_type: 'NO'\ndynamo_config:\n  dynamo_backend: inductor\n"
                                           "  dynamo_mode: max-autotune\n  dynamo_use_fullgraph: true\n",
                                           "d.yaml");
    EXPECT_EQ(d.dynamo_env.at("ACCELERATE_DYNAMO_BACKEND"), "INDUCTOR");
    EXPECT_EQ(d.dynamo_env.at("ACCELERATE_DYNAMO_MODE"), "max-autotune");
    EXPECT_EQ(d.dynamo_env.at("ACCELERATE_DYNAMO_USE_FULLGRAPH"), "True");
}

TEST(ConfigFile, ShardingValuesOfBothAccelerateVersions)
{
    // 0.24.1: the strategy as a number, fsdp_backward_prefetch_policy; a key without the fsdp_ prefix (the
    // launcher adds it); booleans and devices lower-cased as the launcher writes them.
    ClusterConfig f = parse_cluster_config("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n"
                                           "  fsdp_sharding_strategy: 2\n  fsdp_backward_prefetch_policy: BACKWARD_PRE\n"
                                           "  offload_params: True\n",
                                           "f.yaml");
    EXPECT_EQ(f.sharding_env.at("FSDP_SHARDING_STRATEGY"), "2");
    EXPECT_EQ(f.sharding_env.at("FSDP_BACKWARD_PREFETCH"), "BACKWARD_PRE");
    EXPECT_EQ(f.sharding_env.at("FSDP_OFFLOAD_PARAMS"), "true");
    // 1.x's FSDP1 answer: the strategy under fsdp_reshard_after_forward.
    ClusterConfig x = parse_cluster_config("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 1\n"
                                           "  fsdp_reshard_after_forward: SHARD_GRAD_OP\n",
                                           "x.yaml");
    EXPECT_EQ(x.sharding_env.at("FSDP_SHARDING_STRATEGY"), "SHARD_GRAD_OP");
    EXPECT_EQ(x.sharding_env.count("FSDP_RESHARD_AFTER_FORWARD"), 0u);
    ClusterConfig v2 = parse_cluster_config("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
                                            "  fsdp_reshard_after_forward: true\n",
                                            "v2.yaml");
    EXPECT_EQ(v2.sharding_env.at("FSDP_RESHARD_AFTER_FORWARD"), "true");
    // DeepSpeed: "none" as the JSON file is no file; the keys given are ACCELERATE_CONFIG_DS_FIELDS's.
    ClusterConfig d = parse_cluster_config("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 2\n"
                                           "deepspeed_config:\n  deepspeed_config_file: none\n  zero3_init_flag: true\n"
                                           "  offload_param_device: CPU\n",
                                           "d.yaml");
    EXPECT_EQ(d.sharding_env.count("ACCELERATE_DEEPSPEED_CONFIG_FILE"), 0u);
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_DEEPSPEED_ZERO3_INIT"), "true");
    EXPECT_EQ(d.sharding_env.at("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE"), "cpu");
    EXPECT_EQ(d.deepspeed_fields, (std::vector<std::string>{"deepspeed_config_file", "zero3_init_flag", "offload_param_device"}));
    EXPECT_TRUE(d.mixed_precision_given);
}

// parallelism_config (Accelerate 1.10+): its parallelism_config_* keys become the variables accelerate launch exports.
TEST(ConfigFile, ParallelismSectionBecomesLaunchVariables)
{
    const ClusterConfig c = parse_cluster_config("distributed_type: FSDP\nnum_processes: 4\nfsdp_config:\n  fsdp_version: 2\n"
                                                 "parallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
                                                 "  parallelism_config_dp_shard_size: 2\n  parallelism_config_tp_size: 1\n"
                                                 "  parallelism_config_cp_comm_strategy: alltoall\n"
                                                 "  parallelism_config_sp_size: 1\n",
                                                 "p.yaml");
    EXPECT_EQ(c.parallelism_env.at("ACCELERATE_USE_PARALLELISM_CONFIG"), "true");
    EXPECT_EQ(c.parallelism_env.at("PARALLELISM_CONFIG_DP_REPLICATE_SIZE"), "2");
    EXPECT_EQ(c.parallelism_env.at("PARALLELISM_CONFIG_DP_SHARD_SIZE"), "2");
    EXPECT_EQ(c.parallelism_env.at("PARALLELISM_CONFIG_TP_SIZE"), "1");
    EXPECT_EQ(c.parallelism_env.at("PARALLELISM_CONFIG_CP_COMM_STRATEGY"), "alltoall");
    EXPECT_EQ(c.parallelism_env.at("PARALLELISM_CONFIG_SP_SIZE"), "1");
    // sp_size (Ulysses) is built: passed on as any size (the accelerator checks it against the job).
    EXPECT_EQ(parse_cluster_config("distributed_type: FSDP\nparallelism_config:\n  parallelism_config_sp_size: 2\n", "s.yaml")
                  .parallelism_env.at("PARALLELISM_CONFIG_SP_SIZE"),
              "2");
    EXPECT_NE(c.yaml.find("parallelism_config_dp_shard_size: 2"), std::string::npos) << c.yaml;
    EXPECT_TRUE(parse_cluster_config("distributed_type: MULTI_CPU\n", "q.yaml").parallelism_env.empty());
}
