#include "cli/launch_watchdog.hpp"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace accel::cli {

namespace {

constexpr double kDefaultTimeout = 1800.0; // seconds: init_process_group.timeout's default
// Past the timeout, the ranks waiting for the stopped one in a collective fail by themselves (their diagnosis takes
// up to ~2 s) and say more than the launcher can: they get this long to do so first.
constexpr double kGrace = 3.0;

} // namespace

char process_state(pid_t pid)
{
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // "PID (COMM) S ...": COMM may hold spaces and parentheses, so the state follows the last ')'.
    const size_t close = text.rfind(')');
    if (close == std::string::npos || close + 2 >= text.size()) return '?';
    return text[close + 2];
}

StoppedWatchdog::StoppedWatchdog()
{
    char tmpl[] = "/tmp/accel-launch-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) folder_ = tmpl;
}

StoppedWatchdog::~StoppedWatchdog()
{
    if (folder_.empty()) return;
    if (DIR *d = opendir(folder_.c_str())) {
        while (dirent *e = readdir(d))
            if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
                unlink((folder_ + "/" + e->d_name).c_str());
        closedir(d);
    }
    rmdir(folder_.c_str());
}

double StoppedWatchdog::timeout_seconds() const
{
    double best = 0.0;
    if (DIR *d = folder_.empty() ? nullptr : opendir(folder_.c_str())) {
        while (dirent *e = readdir(d)) {
            if (std::strncmp(e->d_name, "timeout.", 8) != 0) continue;
            std::ifstream in(folder_ + "/" + e->d_name);
            double v = 0.0;
            if (in >> v && v > best) best = v;
        }
        closedir(d);
    }
    return best > 0.0 ? best : kDefaultTimeout;
}

std::optional<StoppedWatchdog::Verdict> StoppedWatchdog::check(const std::map<int, pid_t> &children)
{
    using clock = std::chrono::steady_clock;
    const auto now = clock::now();
    if (last_check_ && now - *last_check_ > std::chrono::seconds(1)) stopped_since_.clear();
    last_check_ = now;
    std::optional<Verdict> out;
    double limit = -1.0; // read only when a child is stopped
    for (const auto &[rank, pid] : children) {
        const char state = process_state(pid);
        if (state != 'T' && state != 't') { // 't': stopped by a debugger (tracing stop)
            stopped_since_.erase(pid);
            continue;
        }
        auto since = stopped_since_.emplace(pid, now).first->second;
        const double stopped = std::chrono::duration<double>(now - since).count();
        if (limit < 0.0) limit = timeout_seconds();
        if (out || stopped <= limit + kGrace) continue;
        std::ostringstream why;
        why.precision(3);
        why << "has been stopped (state " << state << " in /proc/" << pid << "/stat: SIGSTOP or a debugger) for "
            << stopped << " s, longer than the job's init_process_group.timeout (" << limit << " s) and " << kGrace
            << " s of grace";
        out = Verdict{rank, pid, why.str()};
    }
    return out;
}

} // namespace accel::cli
