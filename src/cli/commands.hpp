// Subcommands of the `accel` program. Each lives in its own file (launch.cpp, ...) and is listed in
// the table of main.cpp. A subcommand gets its own arguments (argv[0] is the subcommand's name) and
// returns the process exit status.
#pragma once

namespace accel::cli {

int launch_main(int argc, char **argv);
int merge_weights_main(int argc, char **argv); // merge_weights.cpp
int config_main(int argc, char **argv);        // config_command.cpp
int env_main(int argc, char **argv);           // env_command.cpp
int estimate_memory_main(int argc, char **argv); // estimate_memory.cpp
int test_main(int argc, char **argv);            // test_command.cpp

} // namespace accel::cli
