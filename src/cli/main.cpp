// The `accel` program: `accel <subcommand> [arguments]`, as `accelerate <subcommand>`.
// To add a subcommand: one file with `int <name>_main(int, char **)` declared in commands.hpp, and
// one line in kCommands below.
#include "cli/commands.hpp"

#include <cstdio>
#include <cstring>

namespace {

struct Command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
};

const Command kCommands[] = {
    {"config", accel::cli::config_main, "write Accelerate's config file (questionnaire, `default`, `update`)"},
    {"env", accel::cli::env_main, "versions, backends, CPU, memory and the config file, for a bug report"},
    {"estimate-memory", accel::cli::estimate_memory_main, "memory to load and train a model (JSON spec, TorchScript, safetensors)"},
    {"launch", accel::cli::launch_main, "start a program as several processes (data-parallel training)"},
    {"merge-weights", accel::cli::merge_weights_main, "join sharded safetensors weights into one model.safetensors"},
    {"test", accel::cli::test_main, "check that this machine and config can train (a short run under launch)"},
};

void usage(FILE *to)
{
    std::fprintf(to, "usage: accel <command> [<args>]\n\ncommands:\n");
    for (const auto &c : kCommands) std::fprintf(to, "  %-16s %s\n", c.name, c.help);
    std::fprintf(to, "\n`accel <command> --help` describes a command.\n");
}

} // namespace

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 1; // as `accelerate` without a subcommand
    }
    if (std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
        usage(stdout);
        return 0;
    }
    for (const auto &c : kCommands)
        if (std::strcmp(argv[1], c.name) == 0) return c.run(argc - 1, argv + 1);
    std::fprintf(stderr, "accel: unknown command \"%s\"\n\n", argv[1]);
    usage(stderr);
    return 1;
}
