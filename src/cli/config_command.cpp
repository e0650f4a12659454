// `accel config` (the questionnaire), `accel config default` (Accelerate's write_basic_config) and
// `accel config update`: write Accelerate's config file, in Accelerate's key layout, so that Python's
// accelerate reads what accel writes and the reverse. Answers are read line by line from stdin, so the
// questionnaire also runs with its answers piped in (tests do that).
#include "cli/commands.hpp"
#include "common/error.hpp"
#include "config/config_file.hpp"
#include "config/megatron_lm_launch.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace accel::cli {

namespace {

const char *kConfigUsage =
    "usage: accel config [--config_file PATH]\n"
    "       accel config default [--config_file PATH] [--mixed_precision {no,fp16,bf16,fp8}]\n"
    "       accel config update [--config_file PATH]\n"
    "\n"
    "Writes Accelerate's config file (default: $HF_HOME/accelerate/default_config.yaml, HF_HOME defaulting\n"
    "to ~/.cache/huggingface), which `accel launch`, `accel env` and `accel test` read (and Python's\n"
    "accelerate too). A name ending in .json is written as JSON, any other as YAML.\n"
    "\n"
    "  accel config          asks questions (answers are read from stdin, one per line; an empty line takes\n"
    "                        the default shown in brackets; multi-CPU/GPU machines are also asked about\n"
    "                        DeepSpeed, FSDP and Megatron-LM) and writes the file\n"
    "  accel config default  writes a basic config (one process, the CPU) unless the file already exists\n"
    "  accel config update   rewrites an existing file with every key at its current default\n"
    "\n"
    "  --config_file PATH    the file to write (update: to read and rewrite)\n"
    "  --mixed_precision M   (default) no, fp16, bf16 or fp8 (default no)\n"
    "\n"
    "Exit status: 0 written (or, for default, already there), 1 a bad file or answer, 2 bad arguments.\n";

[[noreturn]] void config_usage_error(const std::string &msg)
{
    std::fprintf(stderr, "accel config: %s\n\n%s", msg.c_str(), kConfigUsage);
    std::exit(2);
}

bool ends_with(const std::string &s, const char *suffix)
{
    size_t n = std::strlen(suffix);
    return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

// mkdir -p of the file's folder.
void make_parent(const std::string &path)
{
    for (size_t i = 1; i < path.size(); ++i)
        if (path[i] == '/') {
            std::string d = path.substr(0, i);
            if (mkdir(d.c_str(), 0777) != 0 && errno != EEXIST)
                fail(ACCEL_ERR_PERMISSION_DENIED, d + ": cannot create the folder: " + std::strerror(errno));
        }
}

// Writes YAML text to `path`, as JSON when the name ends in .json; re-reads it with the same reader
// `launch` uses first, so a file accel writes is always one accel reads.
void write_config(const std::string &path, const std::string &yaml)
{
    const std::string text = ends_with(path, ".json") ? config::yaml_to_json(yaml) : yaml;
    config::parse_cluster_config(text, path);
    make_parent(path);
    const std::string tmp = path + ".accel-tmp";
    {
        std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
        if (!f) fail(ACCEL_ERR_PERMISSION_DENIED, path + ": cannot write: " + std::strerror(errno));
        f << text;
        f.close();
        if (!f) fail(ACCEL_ERR_PERMISSION_DENIED, path + ": cannot write: " + std::strerror(errno));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        int e = errno;
        std::remove(tmp.c_str());
        fail(ACCEL_ERR_PERMISSION_DENIED, path + ": cannot write: " + std::strerror(e));
    }
}

struct Args {
    std::optional<std::string> config_file;
    std::string mixed_precision = "no";
};

Args parse_args(int argc, char **argv, int first, bool allow_mp)
{
    Args a;
    for (int i = first; i < argc; ++i) {
        std::string s = argv[i], flag = s, value;
        bool inline_value = false;
        if (auto eq = s.find('='); eq != std::string::npos && s.rfind("--", 0) == 0) {
            flag = s.substr(0, eq);
            value = s.substr(eq + 1);
            inline_value = true;
        }
        auto next = [&]() -> std::string {
            if (inline_value) return value;
            if (i + 1 >= argc) config_usage_error(flag + ": missing value");
            return argv[++i];
        };
        if (flag == "-h" || flag == "--help") {
            std::fputs(kConfigUsage, stdout);
            std::exit(0);
        } else if (flag == "--config_file") {
            a.config_file = next();
            if (a.config_file->empty()) config_usage_error("--config_file: empty path");
        } else if (flag == "--mixed_precision" && allow_mp) {
            std::string v = next();
            std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
            if (v != "no" && v != "fp16" && v != "bf16" && v != "fp8")
                config_usage_error("--mixed_precision: expected no, fp16, bf16 or fp8, got \"" + v + "\"");
            a.mixed_precision = v;
        } else {
            config_usage_error("unknown argument \"" + s + "\"");
        }
    }
    return a;
}

// accelerate config default: write_basic_config. accel's LibTorch here is the CPU one, so the file is
// Accelerate's CPU-only answer: one process, use_cpu true, distributed_type NO.
int config_default(const Args &a)
{
    const std::string path = a.config_file.value_or(config::default_config_file());
    if (access(path.c_str(), F_OK) == 0) {
        std::printf("Configuration already exists at %s, will not override. Run `accel config` manually or pass a "
                    "different `--config_file`.\n",
                    path.c_str());
        return 0;
    }
    std::string yaml = config::emit_yaml({{"compute_environment", "LOCAL_MACHINE"},
                                          {"mixed_precision", "'" + a.mixed_precision + "'"},
                                          {"use_cpu", "true"},
                                          {"num_processes", "1"},
                                          {"distributed_type", "'NO'"},
                                          {"debug", "false"}});
    // Accelerate 1.x also writes enable_cpu_affinity: false; left out (its default) because 0.x refuses the key.
    // Through the reader, which fills in the rest of ClusterConfig's defaults as to_dict() does.
    config::ClusterConfig c = config::parse_cluster_config(yaml, "(default config)");
    // Accelerate writes this file as JSON (2-space indents, sorted keys) whatever its name; JSON is YAML.
    const std::string json = config::yaml_to_json(c.yaml);
    config::parse_cluster_config(json, path + ".json");
    make_parent(path);
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        if (!f) fail(ACCEL_ERR_PERMISSION_DENIED, path + ": cannot write: " + std::strerror(errno));
        f << json;
        if (!f) fail(ACCEL_ERR_PERMISSION_DENIED, path + ": cannot write: " + std::strerror(errno));
    }
    std::printf("accelerate configuration saved at %s\n", path.c_str());
    return 0;
}

int config_update(const Args &a)
{
    std::string path;
    if (a.config_file) path = *a.config_file;
    else path = config::default_config_file();
    if (access(path.c_str(), F_OK) != 0)
        fail(ACCEL_ERR_NOT_FOUND, "The config file at " + path + " doesn't exist (run `accel config` first).");
    config::ClusterConfig c = config::load_cluster_config(path);
    for (const auto &w : c.warnings) std::fprintf(stderr, "accel config update: warning: %s: %s\n", path.c_str(), w.c_str());
    write_config(path, c.yaml);
    std::printf("Successfully updated the configuration file at %s.\n", path.c_str());
    return 0;
}

// ---- the questionnaire ---------------------------------------------------------------------------

class Asker {
public:
    std::string line(const std::string &question)
    {
        std::printf("%s", question.c_str());
        std::fflush(stdout);
        std::string answer;
        if (!std::getline(std::cin, answer)) {
            std::printf("\n");
            fail(ACCEL_ERR_INVALID_ARGUMENT, "no answer (stdin ended) to: " + question);
        }
        if (!isatty(STDIN_FILENO)) std::printf("%s\n", answer.c_str()); // a transcript when answers are piped
        answer.erase(0, answer.find_first_not_of(" \t\r"));
        answer.erase(answer.find_last_not_of(" \t\r") + 1);
        return answer;
    }

    // Re-asks until `convert` accepts the answer (an empty answer is `def`); gives up after 10 tries.
    template <class T>
    T ask(const std::string &question, const std::string &def, const std::function<std::optional<T>(const std::string &)> &convert,
          const std::string &expected)
    {
        for (int tries = 0; tries < 10; ++tries) {
            std::string a = line(question);
            if (a.empty()) a = def;
            if (auto v = convert(a)) return *v;
            std::printf("Please enter %s.\n", expected.c_str());
        }
        fail(ACCEL_ERR_INVALID_ARGUMENT, "no valid answer after 10 tries to: " + question);
    }

    int integer(const std::string &q, const std::string &def, long min, long max)
    {
        return ask<int>(q, def,
                        [&](const std::string &s) -> std::optional<int> {
                            char *end = nullptr;
                            long v = std::strtol(s.c_str(), &end, 10);
                            if (s.empty() || *end != '\0' || v < min || v > max) return std::nullopt;
                            return static_cast<int>(v);
                        },
                        "an integer in " + std::to_string(min) + ".." + std::to_string(max));
    }

    bool yes_no(const std::string &q, bool def)
    {
        return ask<bool>(q, def ? "yes" : "no",
                         [](const std::string &s) -> std::optional<bool> {
                             std::string l = s;
                             std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
                             if (l == "y" || l == "yes" || l == "true" || l == "1") return true;
                             if (l == "n" || l == "no" || l == "false" || l == "0") return false;
                             return std::nullopt;
                         },
                         "yes or no");
    }

    // "([0] a, [1] b)": the index or the option's text.
    int choice(const std::string &q, const std::vector<std::string> &options, int def)
    {
        std::string text = q + " (";
        for (size_t i = 0; i < options.size(); ++i) text += (i ? ", [" : "[") + std::to_string(i) + "] " + options[i];
        text += ") [" + std::to_string(def) + "]: ";
        return ask<int>(text, std::to_string(def),
                        [&](const std::string &s) -> std::optional<int> {
                            for (size_t i = 0; i < options.size(); ++i)
                                if (s == std::to_string(i) || s == options[i]) return static_cast<int>(i);
                            return std::nullopt;
                        },
                        "the number of one option");
    }
};

std::string quoted(const std::string &s)
{
    std::string o = "'";
    for (char c : s) o += c == '\'' ? std::string("''") : std::string(1, c);
    return o + "'";
}

using Entries = std::vector<std::pair<std::string, std::string>>;

void set_distributed_type(Entries &e, const std::string &type)
{
    for (auto &kv : e)
        if (kv.first == "distributed_type") kv.second = type;
}

// DeepSpeed (ZeRO) or FSDP, as Accelerate asks them, with what accel implements: they set distributed_type
// and write deepspeed_config / fsdp_config in Accelerate's layout. Returns whether one was chosen.
bool sharding_questions(Asker &q, Entries &e)
{
    auto set_type = [&e](const std::string &type) { set_distributed_type(e, type); };
    if (q.yes_no("Do you want to use DeepSpeed (ZeRO sharding)? [yes/NO]: ", false)) {
        set_type("DEEPSPEED");
        int stage = q.choice("What should be your DeepSpeed's ZeRO optimization stage?", {"0", "1", "2", "3"}, 2);
        int accum = q.integer("How many gradient accumulation step(s) are you passing in your script? [1]: ", "1", 1,
                              1 << 30);
        bool clip = q.yes_no("Do you want to use gradient clipping? [yes/NO]: ", false);
        std::string ds = "{zero_stage: " + std::to_string(stage) + ", gradient_accumulation_steps: " +
                         std::to_string(accum) + ", offload_optimizer_device: none, offload_param_device: none";
        if (clip) {
            std::string v = q.line("What is the gradient clipping value? [1.0]: ");
            char *end = nullptr;
            double d = v.empty() ? 1.0 : std::strtod(v.c_str(), &end);
            if (!v.empty() && (end == v.c_str() || *end != '\0' || !(d > 0.0)))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "gradient clipping: expected a positive number, got \"" + v + "\"");
            ds += ", gradient_clipping: " + (v.empty() ? std::string("1.0") : v);
        }
        if (stage == 3) ds += ", zero3_init_flag: false, zero3_save_16bit_model: false";
        e.emplace_back("deepspeed_config", ds + "}");
        return true;
    }
    if (!q.yes_no("Do you want to use FullyShardedDataParallel? [yes/NO]: ", false)) return false;
    set_type("FSDP");
    const std::vector<std::string> strategies = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"};
    const std::vector<std::string> policies = {"TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"};
    int strategy = q.choice("What should be your sharding strategy?", strategies, 0);
    int policy = q.choice("What should be your auto wrap policy?", policies, 0);
    // The strategy as its number (1 FULL_SHARD, 2 SHARD_GRAD_OP, 3 NO_SHARD) and no fsdp_version (1 when left
    // out): Accelerate 0.x's FSDP plugin reads only the number, 1.x's reads both.
    std::string fsdp = "{fsdp_sharding_strategy: " + std::to_string(strategy + 1) +
                       ", fsdp_auto_wrap_policy: " + policies[static_cast<size_t>(policy)];
    if (policy == 0) {
        std::string cls;
        while (cls.empty())
            cls = q.line("Specify the comma-separated list of layer types to wrap (the model spec's layer types, "
                         "e.g. `gpt_block`, `transformer_encoder_layer`, `linear`): ");
        fsdp += ", fsdp_transformer_layer_cls_to_wrap: " + quoted(cls);
    } else if (policy == 1) {
        fsdp += ", fsdp_min_num_params: " +
                std::to_string(q.integer("What should be your FSDP's minimum number of parameters for the size-based "
                                         "auto wrap policy? [100000000]: ",
                                         "100000000", 1, 2147483647));
    }
    bool sync = q.yes_no("Do you want each process to start from the main process's weights "
                         "(fsdp_sync_module_states)? [YES/no]: ",
                         true);
    fsdp += std::string(", fsdp_sync_module_states: ") + (sync ? "true" : "false") +
            ", fsdp_offload_params: false, fsdp_state_dict_type: FULL_STATE_DICT}";
    e.emplace_back("fsdp_config", fsdp);
    return true;
}

// Megatron-LM, as Accelerate 0.24.1 asks it after DeepSpeed and FSDP (commands/config/cluster.py, same questions,
// order and defaults): distributed_type MEGATRON_LM and megatron_lm_config keyed by the launcher's flag names, each
// value checked and spelled as `accel launch` takes that flag (config/megatron_lm_launch.hpp). Accelerate asks on
// multi-GPU machines only; accel trains Megatron's tp / pp on CPU processes too, so multi-CPU ones are asked as well.
void megatron_questions(Asker &q, Entries &e)
{
    if (!q.yes_no("Do you want to use Megatron-LM ? [yes/NO]: ", false)) return;
    set_distributed_type(e, "MEGATRON_LM");
    const auto number = [&q](const char *key, const std::string &question, const std::string &def) {
        const config::MegatronLaunchSetting &s = *config::find_megatron_lm_setting(key);
        return q.ask<std::string>(
            question, def,
            [&s, key](const std::string &a) -> std::optional<std::string> {
                try {
                    return config::megatron_lm_flag_text(s, a, key);
                } catch (const Error &) {
                    return std::nullopt;
                }
            },
            s.kind == 'i' ? "an integer in 1..65536" : "a number >= 0");
    };
    const auto flag = [](bool on) { return std::string(on ? "true" : "false"); };
    const std::string tp = number("megatron_lm_tp_degree", "What is the Tensor Parallelism degree/size? [1]:", "1");
    std::string m = "{megatron_lm_tp_degree: " + tp;
    if (tp != "1")
        m += ", megatron_lm_sequence_parallelism: " + flag(q.yes_no("Do you want to enable Sequence Parallelism? [YES/no]: ", true));
    const std::string pp = number("megatron_lm_pp_degree", "What is the Pipeline Parallelism degree/size? [1]:", "1");
    m += ", megatron_lm_pp_degree: " + pp;
    if (pp != "1")
        m += ", megatron_lm_num_micro_batches: " + number("megatron_lm_num_micro_batches", "What is the number of micro-batches? [1]:", "1");
    m += ", megatron_lm_recompute_activations: " +
         flag(q.yes_no("Do you want to enable selective activation recomputation? [YES/no]: ", true));
    // accel's distributed optimizer (ZeRO-1) does not compose with tp or pp (config/megatron_lm_plugin.cpp refuses
    // it): with them the question is not asked and the answer is no.
    bool distributed_optimizer = false;
    if (tp == "1" && pp == "1")
        distributed_optimizer = q.yes_no("Do you want to use distributed optimizer which shards optimizer state and "
                                         "gradients across data pralellel ranks? [YES/no]: ",
                                         true);
    else
        std::printf("(Megatron's distributed optimizer is not built with tensor or pipeline parallelism in accel: "
                    "not used.)\n");
    m += ", megatron_lm_use_distributed_optimizer: " + flag(distributed_optimizer);
    m += ", megatron_lm_gradient_clipping: " +
         number("megatron_lm_gradient_clipping",
                "What is the gradient clipping value based on global L2 Norm (0 to disable)? [1.0]: ", "1.0");
    e.emplace_back("megatron_lm_config", m + "}");
}

int config_questionnaire(const Args &a)
{
    Asker q;
    std::vector<std::pair<std::string, std::string>> e = {{"compute_environment", "LOCAL_MACHINE"}};
    // accel's LibTorch is the CPU one; multi-CPU and multi-GPU machines are also asked about DeepSpeed / FSDP.
    int machine = q.choice("Which type of machine are you using?", {"No distributed training", "multi-CPU", "multi-GPU"}, 0);
    bool use_cpu = false, debug = false;
    int processes = 1;
    if (machine == 0) {
        e.emplace_back("distributed_type", "'NO'");
        use_cpu = q.yes_no("Do you want to run your training on CPU only (even if a GPU is available)? [yes/NO]: ", false);
    } else {
        e.emplace_back("distributed_type", machine == 1 ? "MULTI_CPU" : "MULTI_GPU");
        use_cpu = machine == 1;
        int machines = q.integer("How many different machines will you use (use more than 1 for multi-node training)? [1]: ",
                                 "1", 1, 4096);
        e.emplace_back("num_machines", std::to_string(machines));
        if (machines > 1) {
            int rank = q.integer("What is the rank of this machine? [0]: ", "0", 0, machines - 1);
            e.emplace_back("machine_rank", std::to_string(rank));
            std::string ip;
            while (ip.empty()) ip = q.line("What is the IP address of the machine that will host the main process? ");
            e.emplace_back("main_process_ip", quoted(ip));
            int port = q.integer("What is the port you will use to communicate with the main process? [29500]: ", "29500", 1, 65535);
            e.emplace_back("main_process_port", std::to_string(port));
            bool same = q.yes_no("Are all the machines on the same local network? Answer `no` if nodes are on the cloud "
                                 "and/or on different network hosts [YES/no]: ",
                                 true);
            e.emplace_back("same_network", same ? "true" : "false");
        }
        debug = q.yes_no("Should distributed operations be checked while running for errors? This can avoid timeout "
                         "issues but will be slower. [yes/NO]: ",
                         false);
        processes = q.integer(std::string("How many ") + (machine == 1 ? "CPU processes" : "GPU(s)") +
                                  " should be used for distributed training (over all machines)? [" +
                                  std::to_string(machines) + "]: ",
                              std::to_string(machines), machines, 4096);
        if (processes % machines != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "num_processes " + std::to_string(processes) +
                                                 " is not a multiple of num_machines " + std::to_string(machines));
        if (machine == 2) {
            std::string ids = q.line("What GPU(s) (by id) should be used for training on this machine as a "
                                     "comma-separated list? [all]: ");
            e.emplace_back("gpu_ids", ids.empty() ? "all" : quoted(ids));
        }
    }
    e.emplace_back("use_cpu", use_cpu ? "true" : "false");
    e.emplace_back("debug", debug ? "true" : "false");
    e.emplace_back("num_processes", std::to_string(processes));
    const std::vector<std::string> precisions = {"no", "fp16", "bf16", "fp8"};
    int mp = q.choice("Do you wish to use mixed precision?", precisions, 0);
    e.emplace_back("mixed_precision", quoted(precisions[static_cast<size_t>(mp)]));
    if (mp == 3) {
        // accel emulates TransformerEngine's delayed scaling (the only FP8 backend it has).
        std::string fp8 = "{backend: TE";
        int fmt = q.choice("Which FP8 format should be used?", {"HYBRID", "E4M3"}, 0);
        fp8 += std::string(", fp8_format: ") + (fmt == 0 ? "HYBRID" : "E4M3");
        bool eval = q.yes_no("Do you want to use FP8 autocast during eval mode? [yes/NO]: ", false);
        fp8 += std::string(", use_autocast_during_eval: ") + (eval ? "true" : "false");
        fp8 += ", margin: " + std::to_string(q.integer("What margin should be used for gradient scaling? [0]: ", "0", 0, 127));
        fp8 += ", interval: " + std::to_string(q.integer("What interval should be used for for how often the scaling "
                                                         "factor is recomputed? [1]: ",
                                                         "1", 1, 1 << 30));
        fp8 += ", amax_history_length: " + std::to_string(q.integer("What length of history should be used for the amax "
                                                                    "scaling factor computation? [1024]: ",
                                                                    "1024", 1, 1 << 20));
        int algo = q.choice("Which algorithm should be used for the amax scaling factor computation?", {"max", "most_recent"}, 1);
        fp8 += std::string(", amax_compute_algorithm: ") + (algo == 0 ? "max" : "most_recent") + "}";
        e.emplace_back("fp8_config", fp8);
    }
    if (machine != 0 && !sharding_questions(q, e)) megatron_questions(q, e);
    std::string path = a.config_file.value_or(config::default_config_file());
    // Through the reader: Accelerate's defaults for every other key, and the same checks launch makes.
    config::ClusterConfig c = config::parse_cluster_config(config::emit_yaml(e), path);
    write_config(path, c.yaml);
    std::printf("accelerate configuration saved at %s\n", path.c_str());
    return 0;
}

} // namespace

int config_main(int argc, char **argv)
{
    try {
        if (argc >= 2 && std::strcmp(argv[1], "default") == 0) return config_default(parse_args(argc, argv, 2, true));
        if (argc >= 2 && std::strcmp(argv[1], "update") == 0) return config_update(parse_args(argc, argv, 2, false));
        return config_questionnaire(parse_args(argc, argv, 1, false));
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "accel config: %s\n", e.what());
        return 1;
    }
}

} // namespace accel::cli
