// `accel launch [flags] COMMAND [ARGS...]`: starts COMMAND as num_processes / num_machines processes
// on this machine with the torchrun-style environment (RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT, ...) and Accelerate's ACCELERATE_* switches,
// prefixes each line of their output with "[rankN]: ", and when one process fails stops the others
// (SIGTERM, then SIGKILL after 5 s) and exits with that process's status (128 + signal if killed), or, with
// --max_restarts N, starts them all again up to N times (torchrun's elastic restarts; launch_workers.cpp runs a round).
// torchrun's PET_* variables (and PyTorchJob v1's RANK/WORLD_SIZE form), then Slurm's (SLURM_NNODES, SLURM_NODEID,
// SLURM_JOB_NODELIST), give defaults for the flags left out.
#include "cli/commands.hpp"
#include "common/blas_kernels.hpp"
#include "common/error.hpp"
#include "config/config_file.hpp"
#include "config/dynamo.hpp"
#include "config/megatron_lm_launch.hpp"
#include "cli/launch_config.hpp"
#include "cli/launch_elastic.hpp"
#include "cli/launch_env.hpp"
#include "cli/cpu_affinity.hpp"
#include "cli/launch_watchdog.hpp"
#include "cli/launch_workers.hpp"
#include "cli/numa_affinity.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace accel::cli {

namespace {

const char *kUsage =
    "usage: accel launch [flags] COMMAND [ARGS...]\n"
    "\n"
    "Starts COMMAND as several processes that train data-parallel (a C program, `java ...`, `python3 ...`).\n"
    "\n"
    "  -n, --num_processes N          processes in total over all machines (default: config file, else 1 per machine)\n"
    "      --num_machines N           machines (default 1, or SLURM_NNODES)\n"
    "      --nnodes N|MIN:MAX         torchrun's spelling of --num_machines; MIN:MAX: elastic membership - the job\n"
    "                                 runs on MIN to MAX machines, -n / MAX processes each, admitted as they come;\n"
    "                                 machine ranks follow arrival (machine 0: the launcher at --main_process_ip)\n"
    "      --rdzv_conf K=V,...        with --nnodes MIN:MAX: join_timeout (s to wait for MIN machines, default 600)\n"
    "                                 and last_call_timeout (s after MIN for more, up to MAX, default 30)\n"
    "      --machine_rank R           this machine's index (default 0, or SLURM_NODEID)\n"
    "      --main_process_ip ADDR     address of machine 0 (default 127.0.0.1; required with several machines)\n"
    "      --main_process_port PORT   rendezvous port on machine 0 (default 29500, or a free port when that one\n"
    "                                 is taken on a single machine; 0 picks a free port)\n"
    "      --mixed_precision MODE     no, fp16, bf16 or fp8 (ACCELERATE_MIXED_PRECISION)\n"
    "      --gradient_accumulation_steps N   (ACCELERATE_GRADIENT_ACCUMULATION_STEPS)\n"
    "      --num_cpu_threads_per_process N   OMP_NUM_THREADS (default: OMP_NUM_THREADS, else cores / processes)\n"
    "      --config_file PATH         accelerate config file (YAML, or JSON when named *.json; default\n"
    "                                 ACCELERATE_CONFIG_FILE, else $HF_HOME/accelerate/default_config.yaml when it\n"
    "                                 exists and --cpu is not given); flags override its values\n"
    "      --cpu                      train on the CPU (ACCELERATE_USE_CPU=True)\n"
    "      --use_fsdp                 sharded training, FSDP (ACCELERATE_USE_FSDP=true) with --fsdp_version,\n"
    "                                 --fsdp_sharding_strategy, --fsdp_reshard_after_forward, --fsdp_offload_params,\n"
    "                                 --fsdp_min_num_params, --fsdp_auto_wrap_policy,\n"
    "                                 --fsdp_transformer_layer_cls_to_wrap, --fsdp_backward_prefetch[_policy],\n"
    "                                 --fsdp_state_dict_type, --fsdp_forward_prefetch, --fsdp_use_orig_params,\n"
    "                                 --fsdp_cpu_ram_efficient_loading, --fsdp_sync_module_states,\n"
    "                                 --fsdp_activation_checkpointing VALUE (each exported as FSDP_*)\n"
    "      --use_deepspeed            sharded training, ZeRO (ACCELERATE_USE_DEEPSPEED=true) with --zero_stage,\n"
    "                                 --gradient_clipping, --offload_optimizer_device, --offload_param_device,\n"
    "                                 --zero3_init_flag, --zero3_save_16bit_model, --deepspeed_config_file VALUE\n"
    "                                 (exported as ACCELERATE_DEEPSPEED_* / ACCELERATE_GRADIENT_CLIPPING)\n"
    "                                 (distributed_type FSDP / DEEPSPEED with fsdp_config / deepspeed_config in the\n"
    "                                 config file do the same; the library checks the values)\n"
    "      --use_megatron_lm          Megatron-LM's parallelism (ACCELERATE_USE_MEGATRON_LM=true) with\n"
    "                                 --megatron_lm_tp_degree N, --megatron_lm_pp_degree N,\n"
    "                                 --megatron_lm_num_micro_batches N, --megatron_lm_sequence_parallelism B,\n"
    "                                 --megatron_lm_recompute_activations B, --megatron_lm_use_distributed_optimizer B,\n"
    "                                 --megatron_lm_gradient_clipping X (exported as MEGATRON_LM_*; distributed_type\n"
    "                                 MEGATRON_LM with megatron_lm_config in the config file does the same)\n"
    "      --parallelism_config_dp_replicate_size N, --parallelism_config_dp_shard_size N,\n"
    "      --parallelism_config_tp_size N, --parallelism_config_cp_size N, --parallelism_config_sp_size N,\n"
    "      --parallelism_config_cp_backend B, --parallelism_config_sp_backend B,\n"
    "      --parallelism_config_cp_comm_strategy S, --parallelism_config_sp_seq_length N,\n"
    "      --parallelism_config_sp_seq_length_is_variable B,\n"
    "      --parallelism_config_sp_attn_implementation A   the device mesh (exported as PARALLELISM_CONFIG_* with\n"
    "                                 ACCELERATE_USE_PARALLELISM_CONFIG=true; --use_parallelism_config alone: all 1)\n"
    "      --debug                    ACCELERATE_DEBUG_MODE=true\n"
    "      --enable_cpu_affinity      each local process bound to its own block of CPUs (sched_setaffinity), with\n"
    "                                 OMP_NUM_THREADS the block's size; ACCELERATE_CPU_AFFINITY=1\n"
    "      --dynamo_backend B, --dynamo_mode M, --dynamo_use_fullgraph, --dynamo_use_dynamic   exported as\n"
    "                                 ACCELERATE_DYNAMO_*; libaccel runs backends \"no\", \"eager\" and \"ofi\"\n"
    "                                 (TorchScript models) and refuses the others (torch.compile exists only in\n"
    "                                 Python PyTorch)\n"
    "      --max_restarts N           elastic restarts (torchrun's): when a worker fails, stop every worker and start\n"
    "                                 them all again, up to N times (default 0: the job fails), each time at a fresh\n"
    "                                 rendezvous port; TORCHELASTIC_RESTART_COUNT tells the workers which round it is\n"
    "                                 (accel_accelerator_load_latest_state resumes from the newest checkpoint)\n"
    "      --monitor_interval S       seconds between looks at the workers' state (default 0.1)\n"
    "      --rdzv_id ID               the job's id, TORCHELASTIC_RUN_ID (default \"none\", as torchrun)\n"
    "  -q, --quiet                    no launcher messages\n"
    "      --                         end of flags\n"
    "\n"
    "Flags left out come from torchrun's PET_* variables (PET_NNODES N or MIN:MAX, PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT,\n"
    "PET_NPROC_PER_NODE (a number, cpu, gpu or auto, as torchrun), PET_MAX_RESTARTS, PET_RDZV_ID, PET_RDZV_ENDPOINT,\n"
    "PET_RDZV_CONF, PET_RDZV_BACKEND (static or c10d); with PET_NPROC_PER_NODE also PyTorchJob's RANK = node rank,\n"
    "WORLD_SIZE = all processes, MASTER_ADDR, MASTER_PORT), then Slurm's (SLURM_NNODES, SLURM_NODEID,\n"
    "SLURM_JOB_NODELIST).\n";

struct Options {
    std::optional<int> num_processes, num_machines, machine_rank, main_process_port, grad_accum, threads;
    std::optional<int> nnodes; // --nnodes (torchrun's spelling), checked against --num_machines
    std::optional<std::pair<int, int>> nnodes_range; // --nnodes MIN:MAX with MIN < MAX: elastic membership
    ElasticOptions elastic; // --rdzv_conf's timeouts
    std::optional<std::string> rdzv_conf; // --rdzv_conf's text (else PET_RDZV_CONF's)
    std::optional<std::string> main_process_ip, mixed_precision, config_file;
    bool cpu = false, debug = false, quiet = false, use_fsdp = false, use_deepspeed = false;
    std::map<std::string, std::string> sharding_flags; // flag name (fsdp_version, zero_stage, ...) -> value
    bool use_parallelism_config = false;
    bool use_megatron_lm = false;
    std::map<std::string, std::string> megatron_env; // MEGATRON_LM_* from --megatron_lm_* flags
    std::string megatron_flag;                       // the first of them (named when --use_megatron_lm is missing)
    bool enable_cpu_affinity = false; // --enable_cpu_affinity or the file's enable_cpu_affinity: true
    std::map<std::string, std::string> parallelism_env; // PARALLELISM_CONFIG_* -> value
    std::map<std::string, std::string> dynamo_env;      // ACCELERATE_DYNAMO_* from --dynamo_* flags
    std::optional<int> max_restarts; // --max_restarts: torchrun's elastic restarts of the whole group
    double monitor_interval = 0.1;  // --monitor_interval, seconds
    std::optional<std::string> rdzv_id; // --rdzv_id: TORCHELASTIC_RUN_ID
    std::vector<std::string> command;
};

// accelerate launch's --parallelism_config_* flags and the variables its launcher exports for them (the library
// checks the values; sizes are checked as integers here).
struct ParallelismFlag {
    const char *flag, *env;
    bool size;
};
const ParallelismFlag kParallelismFlags[] = {
    {"--parallelism_config_dp_replicate_size", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE", true},
    {"--parallelism_config_dp_shard_size", "PARALLELISM_CONFIG_DP_SHARD_SIZE", true},
    {"--parallelism_config_tp_size", "PARALLELISM_CONFIG_TP_SIZE", true},
    {"--parallelism_config_cp_size", "PARALLELISM_CONFIG_CP_SIZE", true},
    {"--parallelism_config_sp_size", "PARALLELISM_CONFIG_SP_SIZE", true},
    {"--parallelism_config_cp_backend", "PARALLELISM_CONFIG_CP_BACKEND", false},
    {"--parallelism_config_sp_backend", "PARALLELISM_CONFIG_SP_BACKEND", false},
    {"--parallelism_config_cp_comm_strategy", "PARALLELISM_CONFIG_CP_COMM_STRATEGY", false},
    {"--parallelism_config_sp_seq_length", "PARALLELISM_CONFIG_SP_SEQ_LENGTH", false}, // may be "None"
    {"--parallelism_config_sp_seq_length_is_variable", "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", false},
    {"--parallelism_config_sp_attn_implementation", "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", false},
};

const ParallelismFlag *find_parallelism_flag(const std::string &flag)
{
    for (const auto &f : kParallelismFlags)
        if (flag == f.flag) return &f;
    return nullptr;
}

[[noreturn]] void usage_error(const std::string &msg)
{
    std::fprintf(stderr, "accel launch: %s\n\n%s", msg.c_str(), kUsage);
    std::exit(2);
}

std::string upper_ascii(std::string s)
{
    for (char &ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
}

// --dynamo_backend, upper-cased as Accelerate's launcher does. An unknown name is a usage error; a backend that needs
// torch.compile is exported (a Python Accelerate program may use it) with a warning that libaccel refuses it.
std::string dynamo_backend_flag(const std::string &flag, const std::string &v)
{
    try {
        return config::check_dynamo_backend(v, flag);
    } catch (const Error &e) {
        if (e.code() != ACCEL_ERR_UNIMPLEMENTED) usage_error(e.what());
        std::fprintf(stderr, "accel launch: warning: %s; it is exported for Python Accelerate programs\n", e.what());
        return upper_ascii(v);
    }
}

int to_int(const std::string &flag, const std::string &v, int min, int max)
{
    try {
        return checked_int(flag, v, min, max);
    } catch (const Error &e) {
        usage_error(e.what());
    }
}

// A number of seconds in (0, 3600] ("0.5", "5").
double to_seconds(const std::string &flag, const std::string &v)
{
    char *end = nullptr;
    errno = 0;
    const double x = std::strtod(v.c_str(), &end);
    if (v.empty() || end == nullptr || *end != '\0' || errno != 0 || !(x > 0.0 && x <= 3600.0))
        usage_error(flag + ": expected seconds in (0, 3600], got \"" + v + "\"");
    return x;
}

Options parse(int argc, char **argv)
{
    Options o;
    int i = 1;
    // The last flag that took the next argument as its value: when no command is left, that flag most likely
    // swallowed it (`--zero_stage prog` with the stage forgotten), and the message should say so.
    std::string last_spaced_flag, last_spaced_value;
    auto value = [&](const std::string &flag, const std::string &inline_value, bool has_inline) -> std::string {
        if (has_inline) return inline_value;
        if (i + 1 >= argc) usage_error(flag + ": missing value");
        last_spaced_flag = flag;
        last_spaced_value = argv[i + 1];
        return argv[++i];
    };
    for (; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--") {
            ++i;
            break;
        }
        if (a.empty() || a[0] != '-') break;
        std::string flag = a, inline_value;
        bool has_inline = false;
        if (auto eq = a.find('='); eq != std::string::npos && a.rfind("--", 0) == 0) {
            flag = a.substr(0, eq);
            inline_value = a.substr(eq + 1);
            has_inline = true;
        }
        if (flag == "-h" || flag == "--help") {
            std::fputs(kUsage, stdout);
            std::exit(0);
        } else if (flag == "-n" || flag == "--num_processes") {
            o.num_processes = to_int(flag, value(flag, inline_value, has_inline), 1, 4096);
        } else if (flag == "--num_machines") {
            o.num_machines = to_int(flag, value(flag, inline_value, has_inline), 1, 4096);
        } else if (flag == "--nnodes") {
            // torchrun's spelling: "N" or "MIN:MAX", parsed as torchrun does; a range is elastic (launch_elastic).
            try {
                const auto range = parse_nnodes(value(flag, inline_value, has_inline), flag);
                if (range.first == range.second) o.nnodes = range.first;
                else o.nnodes_range = range;
            } catch (const Error &e) {
                usage_error(e.what());
            }
        } else if (flag == "--rdzv_conf") {
            try {
                o.rdzv_conf = value(flag, inline_value, has_inline);
                parse_rdzv_conf(*o.rdzv_conf, o.elastic.join_timeout, o.elastic.last_call_timeout);
            } catch (const Error &e) {
                usage_error(e.what());
            }
        } else if (flag == "--machine_rank") {
            o.machine_rank = to_int(flag, value(flag, inline_value, has_inline), 0, 4095);
        } else if (flag == "--main_process_ip") {
            o.main_process_ip = value(flag, inline_value, has_inline);
        } else if (flag == "--main_process_port") {
            o.main_process_port = to_int(flag, value(flag, inline_value, has_inline), 0, 65535);
        } else if (flag == "--mixed_precision") {
            std::string v = value(flag, inline_value, has_inline);
            if (v != "no" && v != "fp16" && v != "bf16" && v != "fp8")
                usage_error(flag + ": expected no, fp16, bf16 or fp8, got \"" + v + "\"");
            o.mixed_precision = v;
        } else if (flag == "--gradient_accumulation_steps") {
            o.grad_accum = to_int(flag, value(flag, inline_value, has_inline), 1, 1 << 30);
        } else if (flag == "--num_cpu_threads_per_process") {
            o.threads = to_int(flag, value(flag, inline_value, has_inline), 1, 4096);
        } else if (flag == "--config_file") {
            o.config_file = value(flag, inline_value, has_inline);
        } else if (flag == "--cpu") {
            o.cpu = true;
        } else if (flag == "--debug") {
            o.debug = true;
        } else if (flag == "-q" || flag == "--quiet") {
            o.quiet = true;
        } else if (flag == "--use_fsdp") {
            o.use_fsdp = true;
        } else if (flag == "--use_deepspeed") {
            o.use_deepspeed = true;
        } else if (flag == "--enable_cpu_affinity") {
            o.enable_cpu_affinity = true;
        } else if (flag == "--dynamo_backend") {
            o.dynamo_env["ACCELERATE_DYNAMO_BACKEND"] = dynamo_backend_flag(flag, value(flag, inline_value, has_inline));
        } else if (flag == "--dynamo_mode") {
            o.dynamo_env["ACCELERATE_DYNAMO_MODE"] = value(flag, inline_value, has_inline);
        } else if (flag == "--dynamo_use_fullgraph" || flag == "--dynamo_use_dynamic") {
            o.dynamo_env["ACCELERATE_" + upper_ascii(flag.substr(2))] = "True"; // store_true flags, Python's str(True)
        } else if (flag == "--max_restarts") {
            o.max_restarts = to_int(flag, value(flag, inline_value, has_inline), 0, 1000000);
        } else if (flag == "--monitor_interval") {
            o.monitor_interval = to_seconds(flag, value(flag, inline_value, has_inline));
        } else if (flag == "--rdzv_id") {
            o.rdzv_id = value(flag, inline_value, has_inline);
            if (o.rdzv_id->empty()) usage_error(flag + ": must not be empty");
        } else if (flag == "--use_megatron_lm") {
            o.use_megatron_lm = true;
        } else if (const auto *ms = flag.rfind("--", 0) == 0 ? config::find_megatron_lm_setting(flag.substr(2)) : nullptr) {
            try {
                o.megatron_env[ms->env] = config::megatron_lm_flag_text(*ms, value(flag, inline_value, has_inline), flag);
                if (o.megatron_flag.empty()) o.megatron_flag = flag;
            } catch (const Error &e) {
                usage_error(e.what());
            }
        } else if (flag == "--use_parallelism_config") {
            o.use_parallelism_config = true;
        } else if (const ParallelismFlag *pf = find_parallelism_flag(flag)) {
            std::string v = value(flag, inline_value, has_inline);
            if (pf->size) v = std::to_string(to_int(flag, v, 1, 4096));
            o.parallelism_env[pf->env] = v;
        } else if (flag.rfind("--", 0) == 0 && config::find_sharding_setting(flag.substr(2)) != nullptr) {
            o.sharding_flags[flag.substr(2)] = value(flag, inline_value, has_inline);
        } else {
            usage_error("unknown flag \"" + a + "\"");
        }
    }
    for (; i < argc; ++i) o.command.emplace_back(argv[i]);
    if (o.command.empty() && !last_spaced_flag.empty())
        usage_error("missing the command to run: " + last_spaced_flag + " took \"" + last_spaced_value +
                    "\" as its value (did its value go missing? write " + last_spaced_flag + "=VALUE)");
    if (o.command.empty()) usage_error("missing the command to run");
    if (o.use_fsdp && o.use_deepspeed) usage_error("--use_fsdp and --use_deepspeed exclude each other");
    if (o.use_megatron_lm && (o.use_fsdp || o.use_deepspeed))
        usage_error(std::string("--use_megatron_lm and ") + (o.use_fsdp ? "--use_fsdp" : "--use_deepspeed") +
                    " exclude each other");
    if (o.nnodes) {
        if (o.num_machines && *o.num_machines != *o.nnodes)
            usage_error("--nnodes " + std::to_string(*o.nnodes) + " and --num_machines " +
                        std::to_string(*o.num_machines) + " disagree");
        o.num_machines = o.nnodes;
    }
    if (o.nnodes_range && o.main_process_port == 0)
        usage_error("--nnodes MIN:MAX needs a fixed --main_process_port (every machine's launcher meets there)");
    if (o.nnodes_range && (o.num_machines || o.machine_rank))
        usage_error("--nnodes MIN:MAX: machine ranks follow the machines' arrival; leave out --num_machines and "
                    "--machine_rank");
    return o;
}

std::optional<std::string> env(const char *name) { return process_env(name); }

// CUDA_VISIBLE_DEVICES as CUDA reads it, the one place the launcher reads it: nullopt only when unset (process_env
// reads an empty value as unset, but for CUDA it hides every GPU).
std::optional<std::string> cuda_visible_devices()
{
    const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return visible ? std::optional<std::string>(visible) : std::nullopt;
}

// torchrun's torch.cuda.device_count() without CUDA: the NVIDIA GPUs the kernel lists, narrowed by
// CUDA_VISIBLE_DEVICES.
int visible_gpu_count()
{
    return cli::visible_gpus(static_cast<int>(read_nvidia_gpus("").size()), cuda_visible_devices());
}

// The cluster engine's variables (torchrun's PET_*, PyTorchJob v1, Slurm) as defaults of the flags left out
// (cli/launch_env.cpp); a value accel cannot use is a usage error naming the variable.
void cluster_env_defaults(Options &o)
{
    ClusterFlags f{o.num_processes, o.num_machines,    o.machine_rank, o.main_process_port,
                   o.max_restarts,  o.main_process_ip, o.rdzv_id,      o.rdzv_conf, o.nnodes_range,
                   std::nullopt,    std::nullopt};
    const LocalDevices devices{[] { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }, visible_gpu_count};
    try {
        cli::cluster_env_defaults(f, process_env, devices);
        // PET_RDZV_CONF's timeouts (parsed there; unset when --rdzv_conf gave them).
        if (f.join_timeout) o.elastic.join_timeout = *f.join_timeout;
        if (f.last_call_timeout) o.elastic.last_call_timeout = *f.last_call_timeout;
    } catch (const Error &e) {
        usage_error(e.what());
    }
    o.num_processes = f.num_processes;
    o.num_machines = f.num_machines;
    o.machine_rank = f.machine_rank;
    o.main_process_port = f.main_process_port;
    o.max_restarts = f.max_restarts;
    o.main_process_ip = f.main_process_ip;
    o.rdzv_id = f.rdzv_id;
    if (f.nnodes_range && !o.nnodes_range) { // PET_NNODES=MIN:MAX: checked as --nnodes MIN:MAX is
        o.nnodes_range = f.nnodes_range;
        if (o.main_process_port == 0)
            usage_error("PET_NNODES=MIN:MAX needs a fixed --main_process_port (every machine's launcher meets there)");
        if (o.machine_rank)
            usage_error("PET_NNODES=MIN:MAX: machine ranks follow the machines' arrival; leave out --machine_rank");
    }
}

bool port_free(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bool ok = bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
    close(fd);
    return ok;
}

// A free port below the kernel's ephemeral range (ip_local_port_range): a port bind(0) hands out lies in that
// range, where every outgoing connection (the store clients, Gloo's pairs of every job on the machine) also takes
// its local port, so between this check and rank 0's listen one of them could take it (seen under two test suites
// at once). Below the range only another listener can. Falls back to bind(0) when none is found.
int pick_free_port()
{
    int low = 32768;
    if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> low;
    if (low > 20000 + 1000) {
        uint32_t seed = static_cast<uint32_t>(getpid()) * 2654435761u ^
                        static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count());
        for (int tries = 0; tries < 200; ++tries) {
            seed = seed * 1664525u + 1013904223u;
            int port = 20000 + static_cast<int>((seed >> 8) % static_cast<uint32_t>(low - 20000));
            if (port_free(port)) return port;
        }
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = 29500;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

// What Accelerate's DeepSpeed launcher adds (prepare_deepspeed_cmd_env): the switch, the settings the config file
// gave, and the working folder on PYTHONPATH (its env_var_path_add: empty entries dropped).
void deepspeed_env(const std::vector<std::string> &ds_fields, std::map<std::string, std::string> &extra_env)
{
    extra_env["ACCELERATE_USE_DEEPSPEED"] = "true";
    std::string fields;
    for (const auto &f : ds_fields) fields += (fields.empty() ? "" : ",") + f;
    std::transform(fields.begin(), fields.end(), fields.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    extra_env["ACCELERATE_CONFIG_DS_FIELDS"] = fields;
    std::string path;
    std::stringstream old(env("PYTHONPATH").value_or(""));
    for (std::string p; std::getline(old, p, ':');)
        if (!p.empty()) path += p + ":";
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd) != nullptr) extra_env["PYTHONPATH"] = path + cwd;
}

} // namespace

int launch_main(int argc, char **argv)
{
    Options o = parse(argc, argv);

    // Config file: --config_file, else ACCELERATE_CONFIG_FILE, else the default one when it exists (and
    // --cpu is not given, as Accelerate). Command-line flags win over the file's values.
    std::map<std::string, std::string> extra_env; // from the file: fp8 settings, gpu ids
    // Accelerate's launchers but DeepSpeed's always export the dynamo settings (torch.compile; accel programs
    // ignore them).
    std::map<std::string, std::string> dynamo_env = {{"ACCELERATE_DYNAMO_BACKEND", "NO"},
                                                     {"ACCELERATE_DYNAMO_MODE", "default"},
                                                     {"ACCELERATE_DYNAMO_USE_FULLGRAPH", "False"},
                                                     {"ACCELERATE_DYNAMO_USE_DYNAMIC", "False"}};
    // ACCELERATE_CONFIG_DS_FIELDS: the DeepSpeed settings the config file gave (deepspeed_config's keys, and
    // mixed_precision unless the flag gave it), which Accelerate's DeepSpeed plugin checks against a JSON file.
    std::vector<std::string> ds_fields;
    const bool mixed_precision_flag = o.mixed_precision.has_value();
    std::optional<std::string> cfg_path = o.config_file;
    if (!cfg_path && !o.cpu) cfg_path = config::resolve_config_file(std::nullopt);
    if (cfg_path) {
        config::ClusterConfig cfg;
        try {
            cfg = config::load_cluster_config(*cfg_path);
        } catch (const accel::Error &e) {
            std::fprintf(stderr, "accel launch: %s\n", e.what());
            std::exit(e.code() == ACCEL_ERR_NOT_FOUND ? 2 : 1);
        }
        if (!o.quiet)
            for (const auto &w : cfg.warnings) std::fprintf(stderr, "accel launch: warning: %s: %s\n", cfg_path->c_str(), w.c_str());
        if (!o.num_processes && cfg.num_processes > 0) {
            // distributed_type NO is one process in Accelerate, whatever num_processes says.
            if (cfg.distributed_type == "NO") {
                if (cfg.num_processes > 1 && !o.quiet)
                    std::fprintf(stderr, "accel launch: warning: %s: num_processes: %d ignored: distributed_type is NO "
                                         "(one process); pass -n to override\n",
                                 cfg_path->c_str(), cfg.num_processes);
            } else {
                o.num_processes = cfg.num_processes;
            }
        } else if (!o.num_processes && cfg.num_processes == -1 && cfg.distributed_type != "NO") {
            usage_error(*cfg_path + ": num_processes: not set (-1) for distributed_type " + cfg.distributed_type +
                        "; pass -n or set it in the file");
        }
        // At their defaults (1 machine, rank 0) the file's values leave room for Slurm's below.
        if (!o.num_machines && cfg.num_machines != 1) o.num_machines = cfg.num_machines;
        if (!o.machine_rank && cfg.machine_rank != 0) o.machine_rank = cfg.machine_rank;
        if (!o.main_process_ip && cfg.main_process_ip) o.main_process_ip = cfg.main_process_ip;
        if (!o.main_process_port && cfg.main_process_port) o.main_process_port = cfg.main_process_port;
        if (!o.mixed_precision) o.mixed_precision = cfg.mixed_precision;
        if (cfg.enable_cpu_affinity) o.enable_cpu_affinity = true;
        if (!o.cpu) o.cpu = cfg.use_cpu;
        if (!o.debug) o.debug = cfg.debug;
        if (!o.grad_accum && cfg.gradient_accumulation_steps) o.grad_accum = cfg.gradient_accumulation_steps;
        if (o.mixed_precision == "fp8") extra_env = cfg.fp8_env;
        for (const auto &[k, v] : cfg.dynamo_env) dynamo_env[k] = v;
        for (const auto &[k, v] : cfg.parallelism_env) extra_env[k] = v; // flags override them below
        ds_fields = cfg.deepspeed_fields;
        if (cfg.mixed_precision_given && !mixed_precision_flag) ds_fields.emplace_back("mixed_precision");
        if (cfg.gpu_ids && *cfg.gpu_ids != "all") extra_env["CUDA_VISIBLE_DEVICES"] = *cfg.gpu_ids;
        // The file's engine unless a paradigm flag chose one; its settings unless a flag gives them.
        if (!o.use_fsdp && !o.use_deepspeed && !o.use_megatron_lm) {
            o.use_fsdp = cfg.sharding == "fsdp";
            o.use_deepspeed = cfg.sharding == "deepspeed";
            o.use_megatron_lm = cfg.megatron_lm;
            for (const auto &[k, v] : cfg.sharding_env) extra_env[k] = v;
        }
        // megatron_lm_config applies with --use_megatron_lm too, as in Accelerate (its flags win here).
        if (o.use_megatron_lm) o.megatron_env.insert(cfg.megatron_lm_env.begin(), cfg.megatron_lm_env.end());
    }
    // Sharding flags: exported only with their engine chosen, as `accelerate launch`.
    for (const auto &[name, v] : o.sharding_flags) {
        const config::ShardingSetting *s = config::find_sharding_setting(name);
        if (s->fsdp ? !o.use_fsdp : !o.use_deepspeed)
            usage_error("--" + name + " needs " + (s->fsdp ? "--use_fsdp" : "--use_deepspeed") +
                        " (or distributed_type " + (s->fsdp ? "FSDP" : "DEEPSPEED") + " in the config file)");
        if (s->env != nullptr) extra_env[s->env] = config::sharding_env_text(*s, v);
        else if (!o.quiet)
            std::fprintf(stderr, "accel launch: warning: --%s does not apply (accel launch starts the processes "
                                 "itself; give an nvme path in the program's deepspeed_plugin config)\n", name.c_str());
    }
    // Megatron-LM's flags: exported only with --use_megatron_lm (or the file's MEGATRON_LM), with the launcher's
    // defaults for the degrees and the clipping (config/megatron_lm_launch.hpp).
    if (o.use_megatron_lm) {
        config::megatron_lm_env_defaults(o.megatron_env);
        for (const auto &[k, v] : o.megatron_env) extra_env[k] = v;
    } else if (!o.megatron_flag.empty()) {
        usage_error(o.megatron_flag + " needs --use_megatron_lm (or distributed_type MEGATRON_LM in the config file)");
    }
    // As accelerate launch: any --parallelism_config_* flag turns the ParallelismConfig on.
    if (o.use_parallelism_config || !o.parallelism_env.empty()) {
        extra_env["ACCELERATE_USE_PARALLELISM_CONFIG"] = "true";
        for (const auto &[k, v] : o.parallelism_env) extra_env[k] = v;
    }
    if (o.grad_accum) extra_env.erase("ACCELERATE_GRADIENT_ACCUMULATION_STEPS"); // the flag (or top-level key) wins
    if (o.use_fsdp) {
        extra_env["ACCELERATE_USE_FSDP"] = "true";
        config::fsdp_env_for_library(extra_env);
    }
    if (o.use_deepspeed) deepspeed_env(ds_fields, extra_env);
    else { // Accelerate's DeepSpeed launcher exports no dynamo settings (0.24.1 and 1.x)
        for (const auto &[k, v] : o.dynamo_env) dynamo_env[k] = v; // flags win over the file
        for (const auto &[k, v] : dynamo_env) extra_env[k] = v;
    }

    cluster_env_defaults(o);

    // --nnodes MIN:MAX: the world size follows the machines present; -n counts the processes at MAX machines.
    if (o.nnodes_range) {
        const int max_nodes = o.nnodes_range->second, total = o.num_processes.value_or(max_nodes);
        if (total % max_nodes != 0)
            usage_error("--num_processes " + std::to_string(total) + " is not a multiple of --nnodes MAX " +
                        std::to_string(max_nodes));
        o.num_processes = total / max_nodes; // this machine's, as if it ran alone (the round sets the rest)
        if (!o.main_process_port) o.main_process_port = 29500;
    }
    const int machines = o.num_machines.value_or(1);
    const int machine_rank = o.machine_rank.value_or(0);
    const int world = o.num_processes.value_or(machines);
    if (machine_rank >= machines)
        usage_error("--machine_rank " + std::to_string(machine_rank) + " is not below --num_machines " +
                    std::to_string(machines));
    if (world % machines != 0)
        usage_error("--num_processes " + std::to_string(world) + " is not a multiple of --num_machines " +
                    std::to_string(machines));
    if (machines > 1 && (!o.main_process_ip || !o.main_process_port))
        usage_error("several machines need --main_process_ip and --main_process_port");
    const int local = world / machines;
    std::string addr = o.main_process_ip.value_or("127.0.0.1");
    int port = o.main_process_port.value_or(29500);
    if (machines == 1 && (port == 0 || (!o.main_process_port && !port_free(port)))) port = pick_free_port();

    std::string threads;
    if (o.threads) threads = std::to_string(*o.threads);
    else if (auto v = env("OMP_NUM_THREADS")) threads = *v;
    else {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        threads = std::to_string(std::max(1L, cores / local));
    }

    // OpenBLAS's generic kernels on a CPU it does not know: name the ones for its vector units (read when
    // OpenBLAS loads, so only the environment can). A value of the user's is kept.
    if (const auto core = generic_openblas_kernels()) {
        extra_env["OPENBLAS_CORETYPE"] = core->suggested;
        if (!o.quiet && machine_rank == 0)
            std::fprintf(stderr, "accel launch: OpenBLAS does not know this CPU (it chose its generic %s kernels); "
                                 "running with OPENBLAS_CORETYPE=%s (set OPENBLAS_CORETYPE to choose)\n",
                         core->chosen.c_str(), core->suggested.c_str());
    }

    // --enable_cpu_affinity: local process i gets block i of the launcher's CPUs and as many OpenMP threads
    // (--num_cpu_threads_per_process still wins), as Accelerate binds each process to its own cores.
    // With several NUMA nodes each block lies in one node and its memory prefers that node; on a GPU machine the
    // block is taken from the CPUs near the process's GPU (numa_affinity.hpp).
    std::vector<std::vector<int>> cpu_blocks(static_cast<size_t>(local));
    std::vector<int> memory_nodes(static_cast<size_t>(local), -1);
    if (o.enable_cpu_affinity) {
        const std::vector<int> cpus = allowed_cpus();
        const auto near_gpus = o.cpu ? std::vector<std::vector<int>>{}
                                     : gpu_cpus_of_local_processes("", local, cuda_visible_devices());
        const auto placement = plan_placement(cpus, read_numa_nodes(""), local, near_gpus);
        for (int i = 0; i < local; ++i) {
            cpu_blocks[static_cast<size_t>(i)] = placement[static_cast<size_t>(i)].cpus;
            memory_nodes[static_cast<size_t>(i)] = placement[static_cast<size_t>(i)].memory_node;
        }
        if (cpu_blocks[0].empty())
            std::fprintf(stderr, "accel launch: warning: --enable_cpu_affinity: %d processes cannot have disjoint CPU "
                                 "sets on %zu CPUs (%s); not pinned\n", local, cpus.size(), cpu_list_text(cpus).c_str());
        else if (!o.quiet)
            for (int i = 0; i < local; ++i)
                std::fprintf(stderr, "accel launch: local process %d on CPUs %s (OMP_NUM_THREADS=%s)%s\n", i,
                             cpu_list_text(cpu_blocks[static_cast<size_t>(i)]).c_str(),
                             o.threads ? threads.c_str()
                                       : std::to_string(cpu_blocks[static_cast<size_t>(i)].size()).c_str(),
                             memory_nodes[static_cast<size_t>(i)] < 0 ? "" :
                             (", memory on NUMA node " + std::to_string(memory_nodes[static_cast<size_t>(i)])).c_str());
    }

    WorkerGroup group;
    group.world = world;
    group.local = local;
    group.machines = machines;
    group.machine_rank = machine_rank;
    group.addr = addr;
    group.cpu_affinity = o.enable_cpu_affinity;
    group.threads_flag = o.threads.has_value();
    group.cpu_blocks = cpu_blocks;
    group.memory_nodes = memory_nodes;
    group.command = o.command;
    group.quiet = o.quiet;
    const int max_restarts = o.max_restarts.value_or(0);
    group.max_restarts = max_restarts;
    group.run_id = o.rdzv_id.value_or("none");
    group.monitor_interval = o.monitor_interval;
    StoppedWatchdog watchdog; // ends the job when a child stays stopped longer than the job's timeout
    group.env["OMP_NUM_THREADS"] = threads;
    group.env["ACCELERATE_USE_CPU"] = o.cpu ? "True" : "False";
    group.env["ACCELERATE_MIXED_PRECISION"] = o.mixed_precision.value_or("no");
    if (o.grad_accum) group.env["ACCELERATE_GRADIENT_ACCUMULATION_STEPS"] = std::to_string(*o.grad_accum);
    if (o.debug) group.env["ACCELERATE_DEBUG_MODE"] = "true";
    // The children write into pipes; tell them whether their lines end on a terminal (progress bars).
    if (isatty(STDOUT_FILENO) != 0) group.env["ACCEL_PROGRESS_TTY"] = "1";
    if (!watchdog.folder().empty()) group.env["ACCEL_LAUNCH_STATE_DIR"] = watchdog.folder();
    for (const auto &[k, v] : extra_env) group.env[k] = v;
    install_launcher_signal_handlers();
    if (o.nnodes_range) {
        o.elastic.min_nodes = o.nnodes_range->first;
        o.elastic.max_nodes = o.nnodes_range->second;
        o.elastic.addr = addr;
        o.elastic.port = port;
        o.elastic.quiet = o.quiet;
        group.max_restarts = max_restarts;
        return run_elastic(group, o.elastic, watchdog, pick_free_port);
    }

    add_rendezvous_token(group.env, machines, env); // a job on one machine gets a fresh one (launch_env.hpp)

    // torchrun's elastic restarts: when a worker fails, every worker of this machine is stopped (the round ends)
    // and all start again, up to --max_restarts times. Each round meets at a rendezvous of its own (a fresh
    // port: the old round's store died with its rank 0, and a late message of the old round must not reach the
    // new one); with several machines, port + round, which every machine's launcher computes alike.
    for (int round = 0;; ++round) {
        group.restart_count = round;
        const bool any_port = machines == 1 && o.main_process_port.value_or(0) == 0; // no port asked for
        group.port = round == 0 ? port : any_port ? pick_free_port() : port + round;
        if (!o.quiet && world > 1 && machine_rank == 0)
            std::fprintf(stderr, "accel launch: %d processes (%d per machine, %d machine%s), rendezvous %s:%d%s\n", world,
                         local, machines, machines > 1 ? "s" : "", addr.c_str(), group.port,
                         round > 0 ? (" (restart " + std::to_string(round) + " of " + std::to_string(max_restarts) + ")").c_str() : "");
        const RoundOutcome r = run_worker_group(group, watchdog);
        if (!r.worker_failed || round >= max_restarts) {
            if (r.failed_rank >= 0 && !o.quiet)
                std::fprintf(stderr, "accel launch: failed: rank %d %s%s\n", r.failed_rank, r.failure.c_str(),
                             max_restarts > 0 ? (" (after " + std::to_string(round) + " restart" + (round == 1 ? "" : "s") +
                                                   ", --max_restarts " + std::to_string(max_restarts) + ")").c_str()
                                                : "");
            return r.result;
        }
        if (!o.quiet)
            std::fprintf(stderr, "accel launch: rank %d %s; restarting all %d processes of this machine (restart %d of %d)\n",
                         r.failed_rank, r.failure.c_str(), local, round + 1, max_restarts);
    }
}

} // namespace accel::cli
