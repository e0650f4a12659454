// accel launch's rounds of workers (launch_workers.hpp): fork/exec with the environment, the output relay, and
// the monitor loop that stops the job when a worker fails or stays stopped.
#include "cli/launch_workers.hpp"

#include "cli/cpu_affinity.hpp"
#include "cli/numa_affinity.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

namespace accel::cli {

namespace {

struct Child {
    int rank = 0;
    pid_t pid = -1;
    int out_fd = -1, err_fd = -1;
    std::string out_buf, err_buf;
    bool exited = false;
    int status = 0;
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// Writes the complete lines in `buf` with `prefix` (all of it with flush_all). A progress bar redraws its
// line after '\r': a line keeps only what follows its last '\r'; on a terminal the unfinished line is
// drawn as it goes, prefix included, and the part already drawn is dropped.
void emit_lines(std::string &buf, const std::string &prefix, FILE *to, bool flush_all)
{
    auto last_segment = [](const std::string &line) {
        const size_t cr = line.rfind('\r');
        return cr == std::string::npos ? line : line.substr(cr + 1);
    };
    const bool tty = isatty(fileno(to)) != 0;
    size_t start = 0, nl;
    while ((nl = buf.find('\n', start)) != std::string::npos) {
        const std::string line = buf.substr(start, nl - start);
        std::fprintf(to, "%s%s%s%s\n", tty && line.find('\r') != std::string::npos ? "\r" : "", prefix.c_str(),
                     last_segment(line).c_str(), tty ? "\033[K" : "");
        start = nl + 1;
    }
    buf.erase(0, start);
    if (flush_all && !buf.empty()) {
        std::fprintf(to, "%s%s\n", prefix.c_str(), last_segment(buf).c_str());
        buf.clear();
    }
    const size_t cr = buf.rfind('\r');
    if (tty && cr != std::string::npos) {
        const std::string shown = buf.substr(cr + 1);
        std::fprintf(to, "\r%s%s\033[K", prefix.c_str(), shown.c_str());
        buf.erase(0, cr); // keep the '\r': the finished line redraws from the start
    }
    std::fflush(to);
}

std::string describe_status(int status)
{
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
    }
    return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

// In the forked child: the environment of local process `i`, then exec. Never returns.
[[noreturn]] void exec_worker(const WorkerGroup &g, int i, int rank)
{
    auto set = [](const char *k, const std::string &v) { setenv(k, v.c_str(), 1); };
    set("RANK", std::to_string(rank));
    set("LOCAL_RANK", std::to_string(i));
    set("WORLD_SIZE", std::to_string(g.world));
    set("LOCAL_WORLD_SIZE", std::to_string(g.local));
    set("GROUP_RANK", std::to_string(g.machine_rank));
    set("GROUP_WORLD_SIZE", std::to_string(g.machines));
    set("ROLE_RANK", std::to_string(rank));
    set("ROLE_WORLD_SIZE", std::to_string(g.world));
    set("ROLE_NAME", "default");
    set("MASTER_ADDR", g.addr);
    set("MASTER_PORT", std::to_string(g.port));
    set("TORCHELASTIC_RESTART_COUNT", std::to_string(g.restart_count));
    set("TORCHELASTIC_MAX_RESTARTS", std::to_string(g.max_restarts));
    set("TORCHELASTIC_RUN_ID", g.run_id);
    std::map<std::string, std::string> env = g.env;
    if (g.cpu_affinity) {
        env["ACCELERATE_CPU_AFFINITY"] = "1";
        const std::vector<int> &block = g.cpu_blocks[static_cast<size_t>(i)];
        if (!block.empty()) {
            if (!g.threads_flag) env["OMP_NUM_THREADS"] = std::to_string(block.size());
            if (!bind_to_cpus(block))
                std::fprintf(stderr, "accel launch: warning: cannot bind to CPUs %s: %s\n", cpu_list_text(block).c_str(),
                             std::strerror(errno));
            const int node = static_cast<size_t>(i) < g.memory_nodes.size() ? g.memory_nodes[static_cast<size_t>(i)] : -1;
            if (node >= 0 && !prefer_memory_node(node)) // inherited through exec
                std::fprintf(stderr, "accel launch: warning: cannot prefer NUMA node %d's memory: %s\n", node,
                             std::strerror(errno));
        }
    }
    for (const auto &[k, v] : env) set(k.c_str(), v);
    std::vector<char *> args;
    for (const auto &s : g.command) args.push_back(const_cast<char *>(s.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "accel launch: cannot run \"%s\": %s\n", args[0], std::strerror(errno));
    _exit(127);
}

// Starts every local worker; false (after a message) when a pipe or fork fails.
bool start_workers(const WorkerGroup &g, std::vector<Child> &children)
{
    for (int i = 0; i < g.local; ++i) {
        Child &c = children[static_cast<size_t>(i)];
        c.rank = g.machine_rank * g.local + i;
        int out[2], err[2];
        if (pipe(out) != 0 || pipe(err) != 0) {
            std::perror("accel launch: pipe");
            return false;
        }
        pid_t pid = fork();
        if (pid < 0) {
            std::perror("accel launch: fork");
            return false;
        }
        if (pid == 0) {
            dup2(out[1], STDOUT_FILENO);
            dup2(err[1], STDERR_FILENO);
            close(out[0]); close(out[1]); close(err[0]); close(err[1]);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGPIPE, SIG_DFL);
            exec_worker(g, i, c.rank);
        }
        close(out[1]);
        close(err[1]);
        c.pid = pid;
        c.out_fd = out[0];
        c.err_fd = err[0];
    }
    return true;
}

// Reads what is ready on the children's pipes (waiting up to `wait_ms` for something) and relays whole lines.
void relay_output(std::vector<Child> &children, int world, int wait_ms)
{
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, bool>> who; // child index, is stderr
    for (size_t k = 0; k < children.size(); ++k) {
        if (children[k].out_fd >= 0) {
            fds.push_back({children[k].out_fd, POLLIN, 0});
            who.emplace_back(k, false);
        }
        if (children[k].err_fd >= 0) {
            fds.push_back({children[k].err_fd, POLLIN, 0});
            who.emplace_back(k, true);
        }
    }
    if (!fds.empty()) poll(fds.data(), fds.size(), wait_ms);
    else std::this_thread::sleep_for(std::chrono::milliseconds(std::min(wait_ms, 50)));
    for (size_t f = 0; f < fds.size(); ++f) {
        if (!(fds[f].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Child &c = children[who[f].first];
        bool is_err = who[f].second;
        char buf[65536];
        ssize_t n = read(fds[f].fd, buf, sizeof buf);
        std::string &b = is_err ? c.err_buf : c.out_buf;
        std::string prefix = world > 1 ? "[rank" + std::to_string(c.rank) + "]: " : "";
        if (n > 0) {
            b.append(buf, static_cast<size_t>(n));
            emit_lines(b, prefix, is_err ? stderr : stdout, false);
        } else if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            emit_lines(b, prefix, is_err ? stderr : stdout, true);
            close(fds[f].fd);
            (is_err ? c.err_fd : c.out_fd) = -1;
        }
    }
}

} // namespace

void install_launcher_signal_handlers()
{
    struct sigaction sa{};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);
}

int launcher_signal() { return g_signal; }

RoundOutcome run_worker_group(const WorkerGroup &g, StoppedWatchdog &watchdog)
{
    RoundOutcome out;
    if (g_signal != 0) { // SIGINT/SIGTERM between two rounds: no new round
        out.interrupted = true;
        out.result = 128 + g_signal;
        return out;
    }
    std::vector<Child> children(static_cast<size_t>(g.local));
    if (!start_workers(g, children)) {
        // The workers started so far go; nothing to restart into (the machine is out of processes or files).
        for (auto &c : children)
            if (c.pid > 0) kill(c.pid, SIGKILL);
        for (auto &c : children)
            if (c.pid > 0) waitpid(c.pid, nullptr, 0);
        out.result = 1;
        return out;
    }
    const int wait_ms = std::max(1, static_cast<int>(g.monitor_interval * 1000.0));

    int first_failure = -1; // index into children
    bool kill_pending = false; // SIGKILL the stragglers at kill_at
    auto kill_at = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::time_point> all_exited_since;
    auto next_membership_look = std::chrono::steady_clock::now();
    auto stop_others = [&](int sig) {
        for (auto &c : children)
            if (!c.exited) {
                kill(c.pid, sig);
                if (sig != SIGKILL) kill(c.pid, SIGCONT); // a stopped process acts on the signal only once continued
            }
    };
    auto fail_job = [&](size_t k, int result) {
        first_failure = static_cast<int>(k);
        out.result = result;
        out.worker_failed = true;
        stop_others(SIGTERM);
        kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        kill_pending = true;
    };

    for (;;) {
        relay_output(children, g.world, wait_ms);
        // Reap.
        int status = 0;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (size_t k = 0; k < children.size(); ++k) {
                Child &c = children[k];
                if (c.pid != pid) continue;
                c.exited = true;
                c.status = status;
                bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                if (!ok && first_failure < 0 && !out.interrupted && !out.membership_changed) {
                    if (!g.quiet)
                        std::fprintf(stderr, "accel launch: rank %d (pid %d) %s; stopping the other processes\n", c.rank,
                                     static_cast<int>(pid), describe_status(status).c_str());
                    fail_job(k, exit_code_of(status));
                }
            }
        }
        // A stopped child ends the job as a dead one does: it is the job's failure, killed, and the others stopped.
        if (first_failure < 0 && !out.interrupted) {
            std::map<int, pid_t> live;
            for (const auto &c : children)
                if (!c.exited) live[c.rank] = c.pid;
            if (auto v = watchdog.check(live)) {
                std::fprintf(stderr, "accel launch: rank %d (pid %d) %s; ending the job\n", v->rank,
                             static_cast<int>(v->pid), v->why.c_str());
                for (size_t k = 0; k < children.size(); ++k)
                    if (children[k].pid == v->pid) {
                        kill(v->pid, SIGKILL);
                        fail_job(k, 128 + SIGKILL);
                    }
            }
        }
        // --nnodes MIN:MAX: another node ended the round or waits to join; this node's workers go too.
        if (g.membership_changed && first_failure < 0 && !out.interrupted && !out.membership_changed &&
            std::chrono::steady_clock::now() >= next_membership_look) {
            next_membership_look = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
            if (std::string why = g.membership_changed(); !why.empty()) {
                out.membership_changed = true;
                out.failure = why;
                stop_others(SIGTERM);
                kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
                kill_pending = true;
            }
        }
        if (g_signal != 0 && !out.interrupted) {
            out.interrupted = true;
            stop_others(g_signal);
            out.result = 128 + g_signal;
            kill_at = std::chrono::steady_clock::now() + std::chrono::seconds(5);
            kill_pending = true;
        }
        if (kill_pending && std::chrono::steady_clock::now() >= kill_at) {
            stop_others(SIGKILL);
            kill_pending = false;
        }
        bool all_done = true, all_exited = true;
        for (auto &c : children) {
            all_done = all_done && c.exited && c.out_fd < 0 && c.err_fd < 0;
            all_exited = all_exited && c.exited;
        }
        if (all_done) break;
        // A child that exited may leave a grandchild holding its pipes: stop reading 2 s after all exited.
        if (all_exited) {
            if (!all_exited_since) all_exited_since = std::chrono::steady_clock::now();
            if (std::chrono::steady_clock::now() - *all_exited_since > std::chrono::seconds(2)) {
                for (auto &c : children) {
                    std::string prefix = g.world > 1 ? "[rank" + std::to_string(c.rank) + "]: " : "";
                    emit_lines(c.out_buf, prefix, stdout, true);
                    emit_lines(c.err_buf, prefix, stderr, true);
                    if (c.out_fd >= 0) close(c.out_fd);
                    if (c.err_fd >= 0) close(c.err_fd);
                    c.out_fd = c.err_fd = -1;
                }
                break;
            }
        }
    }
    if (first_failure >= 0) {
        const Child &c = children[static_cast<size_t>(first_failure)];
        out.failed_rank = c.rank;
        out.failure = describe_status(c.status);
    }
    if (out.interrupted || out.membership_changed) out.worker_failed = false;
    return out;
}

} // namespace accel::cli
