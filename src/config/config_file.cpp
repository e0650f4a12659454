// Accelerate's config file, read with yaml-cpp (see config_file.hpp for what takes effect).
#include "config/config_file.hpp"

#include "common/error.hpp"
#include "config/dynamo.hpp"
#include "config/env.hpp"
#include "config/megatron_lm_launch.hpp"
#include "config/str_to_bool.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

namespace accel::config {

namespace {

// A config file is a few hundred bytes; anything this large is not one (and bounds what a bad file costs).
constexpr size_t kMaxConfigBytes = 1 << 20;

const char *const kDistributedTypes[] = {"NO",        "MULTI_CPU", "MULTI_GPU",  "MULTI_NPU",    "MULTI_XPU",
                                         "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_HPU",   "MULTI_NEURON",
                                         "DEEPSPEED", "FSDP",      "XLA",        "MEGATRON_LM", "TP",
                                         "TPU"}; // TPU: Accelerate 0.x's name for XLA

// Strings are tagged "!" in the normalized tree so that emit() quotes them where YAML would read them
// as something else ('no', '1', 'null', ...); untagged scalars (numbers, booleans) are written plain.
YAML::Node str_node(const std::string &s)
{
    YAML::Node n(s);
    n.SetTag("!");
    return n;
}

bool is_quoted(const YAML::Node &n) { return n.Tag() == "!"; }

// Would a YAML 1.1 reader (PyYAML's safe_load, which Accelerate uses) take this plain text for a
// non-string? Then it must be quoted.
bool needs_quotes(const std::string &s)
{
    if (s.empty()) return true;
    std::string l = s;
    std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static const std::set<std::string> words = {"y",   "n",     "yes", "no",   "on",   "off",  "true",
                                                "false", "null", "~",   ".inf", "-.inf", ".nan", "+.inf"};
    if (words.count(l)) return true;
    // numbers (ints, floats, 0x.., 1_000, 1e5, ports, versions like 1.2 are floats too)
    bool numeric = true, digit = false;
    for (char c : s) {
        if (std::isdigit(static_cast<unsigned char>(c))) digit = true;
        else if (!std::strchr("+-._eExXoOabcdefABCDEF:", c)) numeric = false;
    }
    if (numeric && digit && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-' || s[0] == '+' || s[0] == '.'))
        return true;
    return std::strchr("!&*-?{}[],#|>@`\"'%: ", s[0]) != nullptr || s.find(": ") != std::string::npos ||
           s.find(" #") != std::string::npos || s.back() == ' ' || s.back() == ':';
}

// A map's entries sorted by key text. Built through indices and copy construction: assigning a YAML::Node (as
// std::sort would) overwrites the node it refers to; and values are kept, not looked up again by text, which
// fails for keys that are not plain strings (a null key, found by fuzz_launch_config).
std::vector<std::pair<std::string, YAML::Node>> sorted_entries(const YAML::Node &map)
{
    std::vector<std::pair<std::string, YAML::Node>> entries;
    for (const auto &kv : map) entries.emplace_back(kv.first.IsScalar() ? kv.first.Scalar() : std::string(), kv.second);
    std::vector<size_t> order(entries.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a].first < entries[b].first; });
    std::vector<std::pair<std::string, YAML::Node>> sorted;
    sorted.reserve(entries.size());
    for (size_t i : order) sorted.emplace_back(entries[i]);
    return sorted;
}

void emit(YAML::Emitter &e, const YAML::Node &n)
{
    switch (n.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: e << YAML::Null; break;
    case YAML::NodeType::Scalar: {
        const std::string &s = n.Scalar();
        if (is_quoted(n) && needs_quotes(s)) e << YAML::SingleQuoted << s;
        else e << s;
        break;
    }
    case YAML::NodeType::Sequence:
        e << YAML::BeginSeq;
        for (const auto &x : n) emit(e, x);
        e << YAML::EndSeq;
        break;
    case YAML::NodeType::Map: {
        e << YAML::BeginMap;
        for (const auto &[key, value] : sorted_entries(n)) {
            e << YAML::Key << key << YAML::Value;
            emit(e, value);
        }
        e << YAML::EndMap;
        break;
    }
    }
}

std::string flow_text(const YAML::Node &n)
{
    YAML::Emitter e;
    e << YAML::Flow;
    emit(e, n);
    return e.c_str();
}

bool is_null(const YAML::Node &n)
{
    return !n.IsDefined() || n.IsNull() || (n.IsScalar() && !is_quoted(n) && (n.Scalar() == "null" || n.Scalar() == "~"));
}

std::string lower(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

// Reads one file's values with their YAML types checked, naming "file: key" in every message.
class Reader {
public:
    Reader(std::string file) : file_(std::move(file)) {}

    std::string where(const std::string &key) const { return file_ + ": " + key; }

    [[noreturn]] void bad(const std::string &key, const std::string &expected, const YAML::Node &got) const
    {
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             where(key) + ": expected " + expected + ", got " + (is_null(got) ? std::string("null") : flow_text(got)));
    }

    // YAML's booleans, and the words Accelerate's str_to_bool reads (y, yes, t, true, on, 1 / n, no, f, false,
    // off, 0, any case), quoted or not: Accelerate's loader keeps a file's value as it is and its launcher
    // passes it on as text (ACCELERATE_USE_CPU="no"), which the library reads with str_to_bool; and its
    // questionnaire writes some keys as the text typed (downcast_bf16: 'no').
    bool get_bool(const std::string &key, const YAML::Node &n) const
    {
        std::optional<bool> b = n.IsScalar() ? str_to_bool(n.Scalar()) : std::nullopt;
        if (!b) bad(key, "true or false (or yes/no, on/off, 1/0)", n);
        return *b;
    }

    long long get_int(const std::string &key, const YAML::Node &n, long long min, long long max) const
    {
        long long v = 0;
        // Quoted numbers are accepted: Accelerate's questionnaire writes ports and ids as the user typed them.
        if (!n.IsScalar() || !YAML::convert<long long>::decode(n, v) || v < min || v > max)
            bad(key, "an integer in " + std::to_string(min) + ".." + std::to_string(max), n);
        return v;
    }

    std::string get_string(const std::string &key, const YAML::Node &n) const
    {
        if (!n.IsScalar()) bad(key, "a string", n);
        return n.Scalar();
    }

    // `any_case`: the text is lower-cased first (values Accelerate lower-cases before use).
    std::string get_enum(const std::string &key, const YAML::Node &n, const std::vector<std::string> &allowed,
                         bool any_case = false) const
    {
        std::string v = n.IsScalar() ? n.Scalar() : "";
        if (any_case) v = lower(v);
        for (const auto &a : allowed)
            if (v == a) return v;
        std::string list;
        for (const auto &a : allowed) list += (list.empty() ? "" : ", ") + a;
        bad(key, "one of " + list, n);
    }

private:
    std::string file_;
};

std::string upper(std::string s)
{
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
    return s;
}

std::string bool_text(bool b) { return b ? "true" : "false"; }

// parallelism_config's keys (Accelerate 1.10+: the launcher's --parallelism_config_* flags), without their
// "parallelism_config_" prefix; each becomes PARALLELISM_CONFIG_<NAME>. The sizes that are not built yet.
const char *const kParallelismKeys[] = {"dp_replicate_size", "dp_shard_size", "tp_size", "cp_size", "sp_size",
                                        "cp_backend", "sp_backend", "cp_comm_strategy", "sp_seq_length",
                                        "sp_seq_length_is_variable", "sp_attn_implementation"};

// A YAML scalar or list as the text of an environment variable (lists comma-joined, as the launcher's flags).
std::string env_text(const Reader &r, const std::string &where, const YAML::Node &n)
{
    bool b = false;
    // A YAML boolean (PyYAML's True) as the launcher writes it: str(True).lower().
    if (n.IsScalar() && !is_quoted(n) && YAML::convert<bool>::decode(n, b)) return bool_text(b);
    if (n.IsScalar()) return n.Scalar();
    if (n.IsSequence()) {
        std::string out;
        for (const auto &item : n) {
            if (!item.IsScalar()) r.bad(where, "a string or a list of strings", n);
            out += (out.empty() ? "" : ",") + item.Scalar();
        }
        return out;
    }
    r.bad(where, "a value or a list of strings", n);
}

} // namespace

const std::vector<ShardingSetting> &sharding_settings()
{
    // `lower`: the launcher writes the value lower-cased (str(value).lower() in Accelerate's utils/launch.py).
    static const std::vector<ShardingSetting> kSettings = {
        {"fsdp_version", "FSDP_VERSION", true, false},
        {"fsdp_sharding_strategy", "FSDP_SHARDING_STRATEGY", true, false},
        {"fsdp_reshard_after_forward", "FSDP_RESHARD_AFTER_FORWARD", true, true},
        {"fsdp_offload_params", "FSDP_OFFLOAD_PARAMS", true, true},
        {"fsdp_min_num_params", "FSDP_MIN_NUM_PARAMS", true, false},
        {"fsdp_auto_wrap_policy", "FSDP_AUTO_WRAP_POLICY", true, false},
        {"fsdp_transformer_layer_cls_to_wrap", "FSDP_TRANSFORMER_CLS_TO_WRAP", true, false},
        {"fsdp_backward_prefetch", "FSDP_BACKWARD_PREFETCH", true, false},
        // Accelerate 0.x's name (questionnaire key and launch flag) for fsdp_backward_prefetch.
        {"fsdp_backward_prefetch_policy", "FSDP_BACKWARD_PREFETCH", true, false},
        {"fsdp_state_dict_type", "FSDP_STATE_DICT_TYPE", true, false},
        {"fsdp_forward_prefetch", "FSDP_FORWARD_PREFETCH", true, true},
        {"fsdp_use_orig_params", "FSDP_USE_ORIG_PARAMS", true, true},
        {"fsdp_cpu_ram_efficient_loading", "FSDP_CPU_RAM_EFFICIENT_LOADING", true, true},
        {"fsdp_sync_module_states", "FSDP_SYNC_MODULE_STATES", true, true},
        {"fsdp_activation_checkpointing", "FSDP_ACTIVATION_CHECKPOINTING", true, true},
        {"zero_stage", "ACCELERATE_DEEPSPEED_ZERO_STAGE", false, false},
        {"offload_optimizer_device", "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", false, true},
        {"offload_param_device", "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", false, true},
        {"gradient_clipping", "ACCELERATE_GRADIENT_CLIPPING", false, true},
        {"zero3_init_flag", "ACCELERATE_DEEPSPEED_ZERO3_INIT", false, true},
        {"zero3_save_16bit_model", "ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", false, true},
        {"deepspeed_config_file", "ACCELERATE_DEEPSPEED_CONFIG_FILE", false, false},
        {"gradient_accumulation_steps", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS", false, false},
        // Accelerate's launcher does not export these: the program's deepspeed_plugin config (or hf_ds_config)
        // names the folder.
        {"offload_optimizer_nvme_path", nullptr, false, false},
        {"offload_param_nvme_path", nullptr, false, false},
        // The DeepSpeed launcher's own settings (multi-node ssh/pdsh starts): accel launch starts processes itself.
        {"deepspeed_hostfile", nullptr, false, false},
        {"deepspeed_exclusion_filter", nullptr, false, false},
        {"deepspeed_inclusion_filter", nullptr, false, false},
        {"deepspeed_multinode_launcher", nullptr, false, false},
    };
    return kSettings;
}

std::string sharding_env_text(const ShardingSetting &setting, const std::string &value)
{
    return setting.lower ? lower(value) : value;
}

void fsdp_env_for_library(std::map<std::string, std::string> &env)
{
    auto version = env.find("FSDP_VERSION");
    auto reshard = env.find("FSDP_RESHARD_AFTER_FORWARD");
    if ((version != env.end() && version->second != "1") || reshard == env.end() || str_to_bool(reshard->second))
        return;
    if (!env.count("FSDP_SHARDING_STRATEGY")) env["FSDP_SHARDING_STRATEGY"] = upper(reshard->second);
    env.erase(reshard);
}

const ShardingSetting *find_sharding_setting(const std::string &name)
{
    for (const auto &s : sharding_settings())
        if (name == s.name) return &s;
    return nullptr;
}

ClusterConfig parse_cluster_config(const std::string &text, const std::string &file_name)
{
    ClusterConfig c;
    c.source = file_name;
    Reader r(file_name);
    if (text.size() > kMaxConfigBytes)
        fail(ACCEL_ERR_INVALID_ARGUMENT, file_name + ": " + std::to_string(text.size()) +
                                             " bytes is too large for a config file (limit " +
                                             std::to_string(kMaxConfigBytes) + ")");
    if (text.find('\0') != std::string::npos)
        fail(ACCEL_ERR_INVALID_ARGUMENT, file_name + ": contains a NUL byte; not a YAML or JSON text file");
    const bool json = file_name.size() >= 5 && file_name.compare(file_name.size() - 5, 5, ".json") == 0;

    YAML::Node doc;
    try {
        doc = YAML::Load(text);
    } catch (const YAML::Exception &e) {
        fail(ACCEL_ERR_INVALID_ARGUMENT, file_name + ":" + std::to_string(e.mark.line + 1) + ":" +
                                             std::to_string(e.mark.column + 1) + ": not valid " +
                                             (json ? "JSON" : "YAML") + ": " + e.msg);
    }
    if (!doc.IsMap())
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             file_name + ": expected a mapping of keys (an accelerate config file), got " +
                 (is_null(doc) ? std::string("an empty document") : flow_text(doc)));

    // Legacy keys Accelerate still converts on load: `fp16: true` and a top-level `dynamo_backend`.
    YAML::Node in(YAML::NodeType::Map);
    const YAML::Node &cin = in; // const lookups never insert keys
    for (const auto &kv : doc) {
        if (!kv.first.IsScalar()) fail(ACCEL_ERR_INVALID_ARGUMENT, file_name + ": a key is not a string");
        const std::string k = kv.first.Scalar();
        if (cin[k].IsDefined())
            fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(k) + ": the key appears twice");
        in[k] = kv.second;
    }
    if (cin["fp16"].IsDefined()) {
        bool fp16 = r.get_bool("fp16", cin["fp16"]);
        if (!cin["mixed_precision"].IsDefined()) in["mixed_precision"] = str_node(fp16 ? "fp16" : "no");
        in.remove("fp16");
    }
    if (cin["dynamo_backend"].IsDefined()) {
        YAML::Node d(YAML::NodeType::Map);
        d["dynamo_backend"] = cin["dynamo_backend"];
        if (!cin["dynamo_config"].IsDefined()) in["dynamo_config"] = d;
        in.remove("dynamo_backend");
    }

    // Accelerate's ClusterConfig defaults (what to_dict() writes; None values and empty dicts are left out).
    YAML::Node out(YAML::NodeType::Map);
    out["compute_environment"] = str_node("LOCAL_MACHINE");
    out["debug"] = false;
    out["downcast_bf16"] = false;
    // enable_cpu_affinity (Accelerate 1.x) is written only when the file has it: Accelerate 0.x's loader
    // refuses the key, and its absence means false in 1.x.
    out["machine_rank"] = 0;
    out["main_training_function"] = str_node("main");
    out["mixed_precision"] = str_node("no");
    out["num_machines"] = 1;
    out["num_processes"] = -1;
    out["rdzv_backend"] = str_node("static");
    out["same_network"] = false;
    out["tpu_use_cluster"] = false;
    out["tpu_use_sudo"] = false;
    out["use_cpu"] = false;

    std::set<std::string> handled;
    auto take = [&](const char *key) -> std::optional<YAML::Node> {
        handled.insert(key);
        YAML::Node n = cin[key];
        if (is_null(n)) return std::nullopt;
        return n;
    };
    auto warn = [&](const std::string &key, const std::string &why) { c.warnings.push_back(key + ": " + why); };

    // distributed_type (required) and the engines accel has not built yet.
    std::optional<YAML::Node> dt = take("distributed_type");
    if (!dt) fail(ACCEL_ERR_INVALID_ARGUMENT, r.where("distributed_type") + ": missing (required; e.g. NO or MULTI_CPU)");
    c.distributed_type = r.get_enum("distributed_type", *dt,
                                    std::vector<std::string>(std::begin(kDistributedTypes), std::end(kDistributedTypes)));
    out["distributed_type"] = str_node(c.distributed_type);
    if (c.distributed_type == "FSDP") c.sharding = "fsdp";
    if (c.distributed_type == "DEEPSPEED") c.sharding = "deepspeed";
    c.megatron_lm = c.distributed_type == "MEGATRON_LM";
    if (c.distributed_type != "NO" && c.distributed_type != "MULTI_CPU" && c.distributed_type != "MULTI_GPU" &&
        c.sharding.empty() && !c.megatron_lm)
        fail(ACCEL_ERR_UNIMPLEMENTED,
             r.where("distributed_type") + ": " + c.distributed_type +
                 " is not yet supported by accel (NO, MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED and MEGATRON_LM are); "
                 "training would not be what the file asks for");

    if (auto opt = take("compute_environment")) {
        const YAML::Node n = *opt;
        c.compute_environment = r.get_enum("compute_environment", n, {"LOCAL_MACHINE", "AMAZON_SAGEMAKER"});
        if (c.compute_environment != "LOCAL_MACHINE")
            fail(ACCEL_ERR_UNIMPLEMENTED, r.where("compute_environment") + ": AMAZON_SAGEMAKER is not supported by accel");
    }
    if (auto opt = take("mixed_precision")) {
        const YAML::Node n = *opt;
        c.mixed_precision_given = true;
        // PyYAML reads an unquoted `no` (off, false) as false, which Accelerate's loader turns into "no"; its
        // launcher lower-cases the text ('NO', 'FP16' are read).
        bool b = true;
        if (n.IsScalar() && !is_quoted(n) && YAML::convert<bool>::decode(n, b) && !b) c.mixed_precision = "no";
        else c.mixed_precision = r.get_enum("mixed_precision", n, {"no", "fp16", "bf16", "fp8"}, true);
        out["mixed_precision"] = str_node(c.mixed_precision);
    }
    if (auto n = take("use_cpu")) out["use_cpu"] = c.use_cpu = r.get_bool("use_cpu", *n);
    if (auto n = take("debug")) out["debug"] = c.debug = r.get_bool("debug", *n);
    if (auto opt = take("num_processes")) {
        const YAML::Node n = *opt;
        c.num_processes = static_cast<int>(r.get_int("num_processes", n, -1, 4096));
        if (c.num_processes == 0) r.bad("num_processes", "-1 (not set) or an integer in 1..4096", n);
        out["num_processes"] = c.num_processes;
    }
    if (auto n = take("machine_rank")) out["machine_rank"] = c.machine_rank = static_cast<int>(r.get_int("machine_rank", *n, 0, 4095));
    if (auto n = take("num_machines")) out["num_machines"] = c.num_machines = static_cast<int>(r.get_int("num_machines", *n, 1, 4096));
    if (c.machine_rank >= c.num_machines)
        fail(ACCEL_ERR_INVALID_ARGUMENT, r.where("machine_rank") + ": " + std::to_string(c.machine_rank) +
                                             " is not below num_machines " + std::to_string(c.num_machines));
    if (auto opt = take("gpu_ids")) {
        const YAML::Node n = *opt;
        c.gpu_ids = r.get_string("gpu_ids", n);
        out["gpu_ids"] = str_node(*c.gpu_ids);
    }
    if (auto opt = take("main_process_ip")) {
        const YAML::Node n = *opt;
        c.main_process_ip = r.get_string("main_process_ip", n);
        out["main_process_ip"] = str_node(*c.main_process_ip);
    }
    if (auto n = take("main_process_port")) {
        c.main_process_port = static_cast<int>(r.get_int("main_process_port", *n, 0, 65535));
        out["main_process_port"] = *c.main_process_port;
    }
    if (auto opt = take("gradient_accumulation_steps")) {
        const YAML::Node n = *opt;
        c.gradient_accumulation_steps = static_cast<int>(r.get_int("gradient_accumulation_steps", n, 1, 1 << 30));
        out["gradient_accumulation_steps"] = *c.gradient_accumulation_steps;
        warn("gradient_accumulation_steps", "accel's own top-level key (Accelerate keeps it under deepspeed_config; "
                                            "Python's accelerate would refuse this file)");
    }

    // Launch-only keys that do not apply to accel's launcher: kept, reported when not at their default.
    if (auto opt = take("rdzv_backend")) {
        const YAML::Node n = *opt;
        std::string v = r.get_string("rdzv_backend", n);
        out["rdzv_backend"] = str_node(v);
        if (v != "static") warn("rdzv_backend", "\"" + v + "\" does not apply: accel launch always uses a static rendezvous");
    }
    if (auto opt = take("same_network")) {
        const YAML::Node n = *opt;
        out["same_network"] = r.get_bool("same_network", n);
        // accel launch always connects to main_process_ip:main_process_port, torchrun's same_network case.
    }
    if (auto opt = take("main_training_function")) {
        const YAML::Node n = *opt;
        std::string v = r.get_string("main_training_function", n);
        out["main_training_function"] = str_node(v);
        if (v != "main") warn("main_training_function", "only used by Accelerate's notebook launcher; ignored");
    }
    if (auto opt = take("enable_cpu_affinity")) {
        const YAML::Node n = *opt;
        bool v = r.get_bool("enable_cpu_affinity", n);
        out["enable_cpu_affinity"] = v;
        c.enable_cpu_affinity = v; // accel launch pins each local process to its own CPUs
    }
    // TPU keys. Accelerate's questionnaire writes downcast_bf16 and tpu_use_sudo as the text typed (default
    // 'no' / false) and tpu_env as a list, empty when not asked: any scalar is kept, a warning only for a
    // value that asks for something.
    for (const char *k : {"downcast_bf16", "tpu_use_cluster", "tpu_use_sudo"})
        if (auto opt = take(k)) {
            const YAML::Node n = *opt;
            if (!n.IsScalar()) r.bad(k, "true or false", n);
            const std::optional<bool> v = str_to_bool(n.Scalar());
            out[k] = v ? YAML::Node(*v) : str_node(n.Scalar());
            if (v != std::optional<bool>(false)) warn(k, "\"" + n.Scalar() + "\": TPU only; ignored");
        }
    for (const char *k : {"tpu_name", "tpu_zone", "command_file", "tpu_vm", "tpu_env", "commands"})
        if (auto opt = take(k)) {
            const YAML::Node n = *opt;
            if (!n.IsScalar() && !n.IsSequence()) r.bad(k, "a string or a list of strings", n);
            out[k] = n;
            if (n.IsScalar() || n.size() > 0) warn(k, "TPU only; ignored");
        }

    // Dictionaries.
    auto section = [&](const char *key) -> std::optional<YAML::Node> {
        auto n = take(key);
        if (!n) return n;
        if (!n->IsMap()) r.bad(key, "a mapping", *n);
        if (n->size() == 0) return std::nullopt;
        return n;
    };
    // fsdp_config / deepspeed_config: exported as the launcher exports them when distributed_type asks for
    // that engine; otherwise ignored with a warning.
    for (const bool fsdp : {true, false}) {
        const char *key = fsdp ? "fsdp_config" : "deepspeed_config";
        auto n = section(key);
        if (!n) continue;
        out[key] = *n;
        if (!fsdp)
            for (const auto &kv : *n) c.deepspeed_fields.push_back(kv.first.Scalar());
        const bool applies = c.sharding == (fsdp ? "fsdp" : "deepspeed");
        if (!applies) {
            warn(key, std::string("ignored: distributed_type is ") + c.distributed_type + ", not " +
                          (fsdp ? "FSDP" : "DEEPSPEED"));
            continue;
        }
        for (const auto &kv : *n) {
            const std::string k = kv.first.Scalar(), where = std::string(key) + "." + k;
            // Accelerate's launcher prefixes an fsdp_config key without "fsdp" (sharding_strategy) with "fsdp_".
            const std::string name = fsdp && k.find("fsdp") == std::string::npos ? "fsdp_" + k : k;
            const ShardingSetting *setting = find_sharding_setting(name);
            if (setting == nullptr || setting->fsdp != fsdp) {
                if (k == "deepspeed_moe_layer_cls_names")
                    fail(ACCEL_ERR_UNIMPLEMENTED, r.where(where) + ": mixture-of-experts layers are not supported by accel");
                fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key");
            }
            if (is_null(kv.second)) continue;
            const std::string value = sharding_env_text(*setting, env_text(r, where, kv.second));
            // The questionnaire's default answer for the DeepSpeed JSON file is "none", Accelerate's "no file".
            if (name == "deepspeed_config_file" && value == "none") continue;
            if (setting->env != nullptr) c.sharding_env[setting->env] = value;
            else if (value != "none" && !value.empty())
                warn(where, "does not apply to accel launch (it starts the processes itself; give an nvme path in the "
                           "program's deepspeed_plugin config)");
        }
        if (fsdp) fsdp_env_for_library(c.sharding_env);
    }
    // parallelism_config: exported as accelerate launch exports its --parallelism_config_* flags (the library
    // checks the values); the dimensions not built yet are refused here already, naming the key.
    if (auto sec = section("parallelism_config")) {
        out["parallelism_config"] = *sec;
        const std::string prefix = "parallelism_config_";
        for (const auto &kv : *sec) {
            const std::string k = kv.first.Scalar(), where = "parallelism_config." + k;
            const std::string name = k.rfind(prefix, 0) == 0 ? k.substr(prefix.size()) : std::string();
            if (std::find_if(std::begin(kParallelismKeys), std::end(kParallelismKeys),
                             [&](const char *x) { return name == x; }) == std::end(kParallelismKeys))
                fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key (expected parallelism_config_ and one of "
                                                                  "dp_replicate_size, dp_shard_size, tp_size, cp_size, "
                                                                  "sp_size, cp_backend, sp_backend, cp_comm_strategy, ...)");
            if (is_null(kv.second)) continue;
            const std::string value = env_text(r, where, kv.second);
            std::string var = "PARALLELISM_CONFIG_" + name;
            std::transform(var.begin(), var.end(), var.begin(), [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
            c.parallelism_env[var] = value;
        }
        c.parallelism_env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
    }
    // megatron_lm_config: `accelerate config` writes the launch flags' names (megatron_lm_tp_degree, ...); the
    // launcher exports them as MEGATRON_LM_* (the library maps or refuses each value). YAML booleans as Python's
    // str(True); numbers as written (the launcher exports the loaded value's str()).
    if (auto sec = section("megatron_lm_config")) {
        out["megatron_lm_config"] = *sec;
        for (const auto &kv : *sec) {
            const std::string k = kv.first.Scalar(), where = "megatron_lm_config." + k;
            const MegatronLaunchSetting *setting = find_megatron_lm_setting(k);
            if (setting == nullptr)
                fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key (expected megatron_lm_tp_degree, "
                                                                  "megatron_lm_pp_degree, megatron_lm_num_micro_batches, "
                                                                  "megatron_lm_sequence_parallelism, "
                                                                  "megatron_lm_recompute_activations, "
                                                                  "megatron_lm_use_distributed_optimizer or "
                                                                  "megatron_lm_gradient_clipping)");
            if (is_null(kv.second)) continue;
            if (!kv.second.IsScalar()) r.bad(where, setting->kind == 'b' ? "true or false" : "a number", kv.second);
            bool b = false;
            const bool yaml_bool = !is_quoted(kv.second) && YAML::convert<bool>::decode(kv.second, b);
            std::string text = yaml_bool && setting->kind == 'b' ? (b ? "True" : "False") : kv.second.Scalar();
            megatron_lm_flag_text(*setting, text, r.where(where)); // checked as the flag is
            c.megatron_lm_env[setting->env] = text;
        }
        if (!c.megatron_lm)
            warn("megatron_lm_config", std::string("ignored unless accel launch --use_megatron_lm: distributed_type is ") +
                                           c.distributed_type + ", not MEGATRON_LM");
    }
    if (auto sec = section("dynamo_config")) {
        const YAML::Node n = *sec;
        out["dynamo_config"] = n;
        for (const auto &kv : n) {
            std::string k = kv.first.Scalar(), where = std::string("dynamo_config.") + k;
            if (is_null(kv.second)) continue;
            if (k == "dynamo_backend") {
                // The launcher upper-cases the backend (DynamoBackend(value.upper())) and exports it for the program:
                // a Python Accelerate program may compile with it; libaccel takes "NO", "EAGER", "OFI" and refuses the
                // others when it creates an accelerator (config/dynamo.hpp), which the warning says beforehand.
                std::string v = upper(r.get_string(where, kv.second));
                c.dynamo_env["ACCELERATE_DYNAMO_BACKEND"] = v;
                try {
                    check_dynamo_backend(v, r.where(where));
                } catch (const Error &e) {
                    if (e.code() != ACCEL_ERR_UNIMPLEMENTED) throw;
                    warn(where, "\"" + v + "\" is exported as ACCELERATE_DYNAMO_BACKEND for Python Accelerate programs; "
                                "libaccel refuses it when an accelerator is created (torch.compile exists only in Python "
                                "PyTorch; accel runs \"no\", \"eager\" and \"ofi\")");
                }
            } else if (k == "dynamo_mode") {
                c.dynamo_env["ACCELERATE_DYNAMO_MODE"] = r.get_string(where, kv.second);
            } else if (k == "dynamo_use_fullgraph" || k == "dynamo_use_dynamic" || k == "dynamo_use_regional_compilation") {
                // Python's str(bool), not lower-cased: "True" / "False".
                c.dynamo_env["ACCELERATE_" + upper(k)] = r.get_bool(where, kv.second) ? "True" : "False";
            } else {
                fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key");
            }
        }
    }
    // Accelerate 0.x's Intel Extension for PyTorch switches (1.x dropped the section).
    if (auto sec = section("ipex_config")) {
        const YAML::Node n = *sec;
        out["ipex_config"] = n;
        for (const auto &kv : n) {
            std::string k = kv.first.Scalar(), where = "ipex_config." + k;
            if (k != "ipex" && k != "use_xpu") fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key");
            if (!is_null(kv.second) && r.get_bool(where, kv.second))
                warn(where, k == "ipex" ? "Intel Extension for PyTorch is a Python package; ignored"
                                        : "accel has no XPU backend; ignored");
        }
    }
    if (auto sec = section("mpirun_config")) {
        const YAML::Node n = *sec;
        out["mpirun_config"] = n;
        for (const auto &kv : n) {
            std::string k = kv.first.Scalar(), where = "mpirun_config." + k;
            if (k != "mpirun_hostfile" && k != "mpirun_ccl") fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key");
            if (k == "mpirun_hostfile" && !is_null(kv.second))
                fail(ACCEL_ERR_UNIMPLEMENTED, r.where(where) +
                                                  ": accel launch does not start mpirun; run `mpirun --hostfile FILE "
                                                  "-np N PROGRAM` yourself (accel programs read MPI's ranks)");
        }
    }
    if (auto sec = section("fp8_config")) {
        const YAML::Node n = *sec;
        out["fp8_config"] = n;
        const bool applies = c.mixed_precision == "fp8";
        if (!applies) warn("fp8_config", "ignored: mixed_precision is " + c.mixed_precision + ", not fp8");
        for (const auto &kv : n) {
            std::string k = kv.first.Scalar(), where = "fp8_config." + k;
            const YAML::Node &v = kv.second;
            if (is_null(v)) continue;
            auto set = [&](const char *var, const std::string &value) {
                if (applies) c.fp8_env[var] = value;
            };
            if (k == "backend") {
                std::string b = upper(r.get_string(where, v));
                if (b != "TE" && applies)
                    fail(ACCEL_ERR_UNIMPLEMENTED, r.where(where) + ": \"" + r.get_string(where, v) +
                                                      "\": accel emulates TransformerEngine (TE) only");
                set("ACCELERATE_FP8_BACKEND", b);
            } else if (k == "fp8_format") {
                set("ACCELERATE_FP8_FORMAT", upper(r.get_enum(where, v, {"HYBRID", "E4M3", "E5M2", "hybrid", "e4m3", "e5m2"})));
            } else if (k == "margin") {
                set("ACCELERATE_FP8_MARGIN", std::to_string(r.get_int(where, v, 0, 127)));
            } else if (k == "interval") {
                set("ACCELERATE_FP8_INTERVAL", std::to_string(r.get_int(where, v, 1, 1LL << 31)));
            } else if (k == "amax_history_len" || k == "amax_history_length") {
                // The questionnaire writes amax_history_length, launch flags say amax_history_len; both mean it.
                set("ACCELERATE_FP8_AMAX_HISTORY_LEN", std::to_string(r.get_int(where, v, 1, 1 << 20)));
            } else if (k == "amax_compute_algo" || k == "amax_compute_algorithm") {
                set("ACCELERATE_FP8_AMAX_COMPUTE_ALGO", r.get_enum(where, v, {"max", "most_recent"}));
            } else if (k == "use_autocast_during_eval") {
                set("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", bool_text(r.get_bool(where, v)));
            } else if (k == "override_linear_precision") {
                // [fprop, dgrad, wgrad] as a list, or the launch flag's "false,false,false" text
                std::vector<bool> b;
                if (v.IsSequence()) {
                    for (size_t i = 0; i < v.size(); ++i) b.push_back(r.get_bool(where + "[" + std::to_string(i) + "]", v[i]));
                } else {
                    std::stringstream ss(r.get_string(where, v));
                    for (std::string part; std::getline(ss, part, ',');) {
                        part.erase(0, part.find_first_not_of(" ("));
                        part.erase(part.find_last_not_of(" )") + 1);
                        bool x = false;
                        if (!YAML::convert<bool>::decode(YAML::Node(part), x)) r.bad(where, "three booleans", v);
                        b.push_back(x);
                    }
                }
                if (b.size() != 3) r.bad(where, "three booleans (fprop, dgrad, wgrad)", v);
                set("ACCELERATE_FP8_OVERRIDE_FPROP", bool_text(b[0]));
                set("ACCELERATE_FP8_OVERRIDE_DGRAD", bool_text(b[1]));
                set("ACCELERATE_FP8_OVERRIDE_WGRAD", bool_text(b[2]));
            } else if (k == "optimization_level" || k == "opt_level") {
                if (applies) warn(where, "MS-AMP only; ignored with the TE backend");
            } else if (k == "enable_fsdp_float8_all_gather" || k == "pad_inner_dim") {
                if (applies) warn(where, "torchao only; ignored with the TE backend");
            } else {
                fail(ACCEL_ERR_INVALID_ARGUMENT, r.where(where) + ": unknown key");
            }
        }
    }

    for (const auto &kv : in) {
        std::string k = kv.first.Scalar();
        if (!handled.count(k))
            fail(ACCEL_ERR_INVALID_ARGUMENT,
                 r.where(k) + ": unknown key (not one of Accelerate's config keys: compute_environment, distributed_type, "
                              "mixed_precision, use_cpu, debug, num_processes, machine_rank, num_machines, gpu_ids, "
                              "main_process_ip, main_process_port, rdzv_backend, same_network, main_training_function, "
                              "enable_cpu_affinity, downcast_bf16, fp8_config, deepspeed_config, fsdp_config, "
                              "parallelism_config, megatron_lm_config, mpirun_config, dynamo_config, ipex_config, tpu_*)");
    }

    // The normalized document.
    std::vector<std::string> keys;
    for (const auto &kv : out) keys.push_back(kv.first.Scalar());
    std::sort(keys.begin(), keys.end());
    for (const auto &k : keys) c.entries.emplace_back(k, flow_text(out[k]));
    YAML::Emitter e;
    emit(e, out);
    c.yaml = std::string(e.c_str()) + "\n";
    return c;
}

ClusterConfig load_cluster_config(const std::string &path)
{
    std::ifstream f(path, std::ios::binary);
    if (!f) fail(ACCEL_ERR_NOT_FOUND, path + ": cannot read the config file: " + std::strerror(errno));
    std::string text;
    char buf[65536];
    while (f.read(buf, sizeof buf) || f.gcount() > 0) {
        text.append(buf, static_cast<size_t>(f.gcount()));
        if (text.size() > kMaxConfigBytes) break;
    }
    if (f.bad()) fail(ACCEL_ERR_NOT_FOUND, path + ": cannot read the config file");
    return parse_cluster_config(text, path);
}

std::string default_config_file()
{
    std::string hf;
    if (auto v = env_string("HF_HOME")) hf = *v;
    else if (auto x = env_string("XDG_CACHE_HOME")) hf = *x + "/huggingface";
    else hf = env_string("HOME").value_or("") + "/.cache/huggingface";
    if (hf.rfind("~/", 0) == 0) hf = env_string("HOME").value_or("") + hf.substr(1); // expanduser
    return hf + "/accelerate/default_config.yaml";
}

std::optional<std::string> resolve_config_file(const std::optional<std::string> &flag)
{
    if (flag) return flag;
    if (auto v = env_string("ACCELERATE_CONFIG_FILE")) return v;
    std::string def = default_config_file();
    std::ifstream f(def);
    if (f) return def;
    return std::nullopt;
}

std::string emit_yaml(const std::vector<std::pair<std::string, std::string>> &entries)
{
    YAML::Node out(YAML::NodeType::Map);
    for (const auto &[k, v] : entries) out[k] = YAML::Load(v);
    YAML::Emitter e;
    emit(e, out);
    return std::string(e.c_str()) + "\n";
}

namespace {

std::string json_quote(const std::string &s)
{
    std::string o = "\"";
    for (unsigned char ch : s) {
        switch (ch) {
        case '"': o += "\\\""; break;
        case '\\': o += "\\\\"; break;
        case '\n': o += "\\n"; break;
        case '\t': o += "\\t"; break;
        case '\r': o += "\\r"; break;
        default:
            if (ch < 0x20) {
                char b[8];
                std::snprintf(b, sizeof b, "\\u%04x", ch);
                o += b;
            } else {
                o += static_cast<char>(ch);
            }
        }
    }
    return o + "\"";
}

void json_of(const YAML::Node &n, int indent, std::string &o)
{
    const std::string pad(static_cast<size_t>(indent + 2), ' '), close(static_cast<size_t>(indent), ' ');
    if (n.IsMap()) {
        const auto entries = sorted_entries(n);
        if (entries.empty()) { o += "{}"; return; }
        o += "{\n";
        for (size_t i = 0; i < entries.size(); ++i) {
            o += pad + json_quote(entries[i].first) + ": ";
            json_of(entries[i].second, indent + 2, o);
            o += i + 1 < entries.size() ? ",\n" : "\n";
        }
        o += close + "}";
    } else if (n.IsSequence()) {
        if (n.size() == 0) { o += "[]"; return; }
        o += "[\n";
        for (size_t i = 0; i < n.size(); ++i) {
            o += pad;
            json_of(n[i], indent + 2, o);
            o += i + 1 < n.size() ? ",\n" : "\n";
        }
        o += close + "]";
    } else if (is_null(n)) {
        o += "null";
    } else if (is_quoted(n)) {
        o += json_quote(n.Scalar());
    } else {
        const std::string &s = n.Scalar();
        bool b = false;
        long long i = 0;
        double d = 0;
        if (s == "true" || s == "false") o += s;
        else if (YAML::convert<bool>::decode(n, b)) o += b ? "true" : "false";
        else if (YAML::convert<long long>::decode(n, i)) o += std::to_string(i);
        else if (YAML::convert<double>::decode(n, d) && std::isfinite(d)) o += s;
        else o += json_quote(s);
    }
}

} // namespace

std::string yaml_to_json(const std::string &yaml_text)
{
    std::string o;
    json_of(YAML::Load(yaml_text), 0, o);
    return o + "\n";
}

} // namespace accel::config
