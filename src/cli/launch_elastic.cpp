// accel launch --nnodes MIN:MAX (launch_elastic.hpp): the rounds of an elastic job over the agent store.
// Store keys, per round r: elastic/r/joined (a counter the non-host launchers take their places from),
// elastic/r/port (the workers' rendezvous port) and elastic/r/nodes (written last: the round is closed),
// elastic/r/restart (some launcher ended the round), elastic/r/waiting (launchers that came too late),
// elastic/r/done; elastic/round is the host's current round (where a newcomer joins), elastic/failed ends the job.
#include "cli/launch_elastic.hpp"

#include "cli/elastic_values.hpp"

#include "common/error.hpp"
#include "distributed/auth_store.hpp"
#include "distributed/rdzv_wire.hpp"
#include "distributed/rendezvous.hpp"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

namespace accel::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string key(int round, const char *what) { return "elastic/" + std::to_string(round) + "/" + what; }

// Whether `host` names an address of this machine: one of its addresses can be bound. The launcher there hosts
// the agent store (torchrun's c10d rendezvous decides alike, by host name).
bool is_local_address(const std::string &host)
{
    addrinfo hints{}, *res = nullptr;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
    bool local = false;
    for (addrinfo *a = res; a != nullptr && !local; a = a->ai_next) {
        const int fd = socket(a->ai_family, SOCK_STREAM, 0);
        if (fd < 0) continue;
        local = bind(fd, a->ai_addr, a->ai_addrlen) == 0; // port 0 in the address: any port
        close(fd);
    }
    freeaddrinfo(res);
    return local;
}

// Whether `port` can be listened on here: else another launcher of this machine hosts the store (asked first so
// that LibTorch does not log its failed bind).
bool port_bindable(int port)
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one); // as TCPStore's listener
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool ok = bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0;
    close(fd);
    return ok;
}

// The launchers' meeting point. With the job's rendezvous token (ACCEL_RDZV_TOKEN / ACCEL_RDZV_TOKEN_FILE in the
// launchers' environment) it is the workers' authenticated store (distributed/auth_store.hpp): a launcher
// without the token, or with another, is refused there (the host logs its address) and never joins a round;
// without a token, LibTorch's TCPStore, open to anyone who reaches the port.
class AgentStore {
  public:
    AgentStore(const ElasticOptions &o) : o_(o), token_(distributed::rdzv::token_from_env())
    {
        if (is_local_address(o.addr) && port_bindable(o.port)) {
            try { // the first launcher of the store's machine hosts it; the others there find the port taken
                store_ = open(true);
                host_ = true;
                return;
            } catch (const Error &) {
                throw; // the token: refused (or unreadable) even by our own host
            } catch (const std::exception &) {
            }
        }
        try {
            store_ = open(false);
        } catch (const Error &e) {
            fail(e.code(), "the elastic rendezvous (agent store) at " + where() + ": " + e.what());
        } catch (const std::exception &e) {
            fail(ACCEL_ERR_UNAVAILABLE, "cannot reach the elastic rendezvous (agent store) at " + where() + ": " +
                                            first_line(e.what()));
        }
    }
    bool host() const { return host_; }
    bool guarded() const { return token_.has_value(); }
    std::string where() const { return o_.addr + ":" + std::to_string(o_.port); }
    int64_t count(const std::string &k) { return store_->add(k, 0); }
    int64_t add(const std::string &k) { return store_->add(k, 1); }
    bool has(const std::string &k) { return store_->check({k}); }
    void set(const std::string &k, const std::string &v) { store_->set(k, std::vector<uint8_t>(v.begin(), v.end())); }
    std::string get(const std::string &k)
    {
        const auto v = store_->get(k);
        return std::string(v.begin(), v.end());
    }
    static std::string first_line(const std::string &s) { return s.substr(0, s.find('\n')); }

  private:
    c10::intrusive_ptr<c10d::Store> open(bool server) const
    {
        const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(std::max(o_.join_timeout, 30.0) * 1000.0));
        if (token_) {
            distributed::Rendezvous r;
            r.host = o_.addr;
            r.port = o_.port;
            return distributed::connect_authenticated(r, *token_, server, c10::nullopt, timeout, nullptr);
        }
        c10d::TCPStoreOptions so;
        so.port = static_cast<uint16_t>(o_.port);
        so.waitWorkers = false;
        so.timeout = timeout;
        so.isServer = server;
        return c10::make_intrusive<c10d::TCPStore>(o_.addr, so);
    }

    const ElasticOptions &o_;
    std::optional<std::string> token_;
    c10::intrusive_ptr<c10d::Store> store_;
    bool host_ = false;
};

struct Membership {
    int nodes = 0, rank = 0, port = 0;
};

// Sleeps a little; UNAVAILABLE-free ABORTED when the launcher was told to stop, DEADLINE_EXCEEDED past `deadline`.
void wait_a_little(Clock::time_point deadline, const std::string &what)
{
    if (launcher_signal() != 0) fail(ACCEL_ERR_ABORTED, "interrupted while " + what);
    if (Clock::now() > deadline) fail(ACCEL_ERR_DEADLINE_EXCEEDED, "timed out " + what);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void check_not_failed(AgentStore &s)
{
    if (s.has("elastic/failed"))
        fail(ACCEL_ERR_ABORTED, "the job failed on another node: " + store_text(s.get("elastic/failed")));
}

// The host opens round r, waits for MIN nodes (itself included), then up to the last call for more up to MAX,
// and closes it; it is node 0, and its machine hosts the workers' rendezvous.
Membership host_round(AgentStore &s, int r, const ElasticOptions &o, const std::function<int()> &pick_port)
{
    s.set("elastic/round", std::to_string(r));
    const auto present = [&] { return 1 + static_cast<int>(s.count(key(r, "joined"))); };
    const auto join_deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.join_timeout));
    while (present() < o.min_nodes)
        wait_a_little(join_deadline, "waiting for " + std::to_string(o.min_nodes) + " nodes (--nnodes MIN) to join "
                                     "round " + std::to_string(r) + " (" + std::to_string(present()) + " joined within "
                                     "join_timeout " + std::to_string(static_cast<int>(o.join_timeout)) + " s)");
    const auto last_call = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.last_call_timeout));
    while (present() < o.max_nodes && Clock::now() < last_call) wait_a_little(last_call + std::chrono::hours(1), "in the last call");
    Membership m;
    m.nodes = std::min(present(), o.max_nodes);
    m.port = pick_port();
    s.set(key(r, "port"), std::to_string(m.port));
    s.set(key(r, "nodes"), std::to_string(m.nodes));
    return m;
}

// Another launcher joins round r; nullopt when the round closed without it (it waits for the next).
std::optional<Membership> join_round(AgentStore &s, int r, const ElasticOptions &o)
{
    const int64_t joined = s.add(key(r, "joined")); // 1, 2, ...: node `joined` if the round has room
    const int place = store_int(key(r, "joined"), std::to_string(joined), 1, 1 << 20);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                             std::chrono::duration<double>(o.join_timeout + o.last_call_timeout + 30.0));
    while (!s.has(key(r, "nodes"))) {
        check_not_failed(s);
        wait_a_little(deadline, "waiting for round " + std::to_string(r) + " to close at " + s.where());
    }
    Membership m;
    m.nodes = store_int(key(r, "nodes"), s.get(key(r, "nodes")), 1, o.max_nodes);
    if (place >= m.nodes) {
        s.add(key(r, "waiting"));
        return std::nullopt;
    }
    m.rank = place;
    m.port = store_int(key(r, "port"), s.get(key(r, "port")), 1, 65535);
    return m;
}

// A newcomer (or a launcher left out of a round): the host's current round, once it is past `after`.
int next_open_round(AgentStore &s, int after, const ElasticOptions &o)
{
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.join_timeout));
    for (;;) {
        check_not_failed(s);
        if (s.has("elastic/round")) {
            const int r = store_int("elastic/round", s.get("elastic/round"), 0, 1 << 30);
            if (r > after) return r;
        }
        wait_a_little(deadline, "waiting for a round to join at " + s.where());
    }
}

int run_rounds(WorkerGroup &group, const ElasticOptions &o, StoppedWatchdog &watchdog,
               const std::function<int()> &pick_port, AgentStore &s)
{
    int failures = 0;
    int r = s.host() ? 0 : next_open_round(s, -1, o);
    for (;;) {
        std::optional<Membership> m;
        if (s.host()) {
            m = host_round(s, r, o, pick_port);
        } else {
            m = join_round(s, r, o);
            if (!m) {
                if (!o.quiet)
                    std::fprintf(stderr, "accel launch: round %d closed without this node; waiting to join the next\n", r);
                r = next_open_round(s, r, o);
                continue;
            }
        }
        group.machines = m->nodes;
        group.machine_rank = m->rank;
        group.world = m->nodes * group.local;
        group.port = m->port;
        group.restart_count = failures; // torchrun's count: worker failures, not membership changes
        if (!o.quiet)
            std::fprintf(stderr, "accel launch: elastic round %d: %d node%s (--nnodes %d:%d), this node %d, world size %d, "
                                 "rendezvous %s:%d\n", r, m->nodes, m->nodes == 1 ? "" : "s", o.min_nodes, o.max_nodes,
                         m->rank, group.world, group.addr.c_str(), m->port);
        const int nodes = m->nodes, round = r;
        group.membership_changed = [&s, round, nodes, &o]() -> std::string {
            try {
                if (s.has(key(round, "restart"))) return "another node ended round " + std::to_string(round);
                if (nodes < o.max_nodes && s.count(key(round, "waiting")) > 0) return "a node is waiting to join";
            } catch (const std::exception &) {
                // The store's host is gone: its workers are too, and this node's workers' collectives fail.
            }
            return "";
        };
        const RoundOutcome out = run_worker_group(group, watchdog);
        if (out.interrupted) return out.result;
        if (!out.worker_failed && !out.membership_changed) {
            try {
                s.add(key(r, "done"));
                // The host keeps the store up until every node finished (they may still look at it).
                const auto until = Clock::now() + std::chrono::seconds(30);
                while (s.host() && s.count(key(r, "done")) < nodes && Clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(50));
            } catch (const std::exception &) {
            }
            return out.result;
        }
        try {
            s.set(key(r, "restart"), "1");
        } catch (const std::exception &) {
        }
        if (out.worker_failed && ++failures > group.max_restarts) {
            const std::string why = "rank " + std::to_string(out.failed_rank) + " " + out.failure;
            if (!o.quiet)
                std::fprintf(stderr, "accel launch: failed: %s (after %d restart%s, --max_restarts %d)\n", why.c_str(),
                             failures - 1, failures - 1 == 1 ? "" : "s", group.max_restarts);
            try {
                s.set("elastic/failed", why);
            } catch (const std::exception &) {
            }
            return out.result;
        }
        if (!o.quiet)
            std::fprintf(stderr, "accel launch: %s%s; starting round %d\n",
                         out.worker_failed ? ("rank " + std::to_string(out.failed_rank) + " ").c_str() : "",
                         out.failure.c_str(), r + 1);
        ++r;
    }
}

} // namespace

int run_elastic(WorkerGroup group, const ElasticOptions &o, StoppedWatchdog &watchdog,
                const std::function<int()> &pick_port)
{
    try {
        AgentStore s(o);
        if (!o.quiet)
            std::fprintf(stderr, "accel launch: elastic rendezvous at %s (%s, %s)\n", s.where().c_str(),
                         s.host() ? "hosted by this launcher" : "joined",
                         s.guarded() ? "rendezvous token proven" : "no rendezvous token: open to anyone who reaches it");
        return run_rounds(group, o, watchdog, pick_port, s);
    } catch (const Error &e) {
        std::fprintf(stderr, "accel launch: elastic rendezvous: %s\n", e.what());
    } catch (const std::exception &e) {
        std::fprintf(stderr, "accel launch: elastic rendezvous at %s:%d is gone (its launcher, machine 0's, ended? or it "
                             "refused this launcher, which has %s ACCEL_RDZV_TOKEN): %s\n", o.addr.c_str(), o.port,
                     distributed::rdzv::token_from_env() ? "another" : "no", AgentStore::first_line(e.what()).c_str());
    }
    return 1;
}

} // namespace accel::cli
