#include "distributed/thread_communicator.hpp"

#include "common/error.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

namespace accel::distributed {

namespace {

// What one rank brought to a collective: its call (to check that every rank made the same one) and a copy
// of its tensor (copied, so the caller may change its own afterwards).
struct Deposit {
    std::string call;
    at::Tensor tensor;
};

struct Round {
    explicit Round(int32_t n) : in(static_cast<size_t>(n)) {}
    std::vector<Deposit> in;
    at::Tensor result;                  // computed once by the last rank to arrive
    std::shared_ptr<struct World> group; // new_group: the sub-world every member joins
};

std::string describe(const at::Tensor &t)
{
    if (!t.defined()) return "(no tensor)";
    return std::string(c10::toString(t.scalar_type())) + " " + c10::str(t.sizes());
}

at::Tensor reduce(const std::vector<Deposit> &in, ReduceOp op)
{
    // In rank order on one thread: every rank receives the same bits.
    at::Tensor acc = in[0].tensor.clone();
    for (size_t r = 1; r < in.size(); ++r) {
        const at::Tensor &t = in[r].tensor;
        switch (op) {
        case ReduceOp::Sum:
        case ReduceOp::Avg: acc.add_(t); break;
        case ReduceOp::Max: acc = at::maximum(acc, t); break;
        case ReduceOp::Min: acc = at::minimum(acc, t); break;
        }
    }
    if (op == ReduceOp::Avg) {
        // As the gloo and mpi backends: sum, then divide (floor for integers).
        const int64_t n = static_cast<int64_t>(in.size());
        if (at::isFloatingType(acc.scalar_type())) acc.div_(n);
        else acc.div_(n, "floor");
    }
    return acc;
}

// The state all ranks of one group share.
struct World {
    World(int32_t n, std::chrono::milliseconds t) : size(n), timeout(t), current(std::make_shared<Round>(n)), here(n, false) {}

    const int32_t size;
    const std::chrono::milliseconds timeout;
    std::mutex m;
    std::condition_variable cv;
    std::shared_ptr<Round> current;
    int32_t arrived = 0;
    uint64_t generation = 0;
    std::vector<bool> here; // who has arrived at the current round (for the timeout's message)
    // The first failure: the ranks waiting in that round fail with it; later calls with ABORTED.
    accel_status_t failed_code = ACCEL_OK;
    std::string failed_message;
    uint64_t failed_generation = 0;
    std::map<std::tuple<int32_t, int32_t, int32_t>, std::deque<at::Tensor>> mailbox; // (src, dst, tag)
    std::vector<std::weak_ptr<World>> children; // sub-groups, aborted with this world

    // Caller holds `m`.
    [[noreturn]] void poison_locked(accel_status_t code, const std::string &message)
    {
        if (failed_code == ACCEL_OK) {
            failed_code = code;
            failed_message = message;
            failed_generation = generation;
        }
        cv.notify_all();
        fail(code, message);
    }
    // Caller holds `m`: a round that did not complete fails with the first cause; anything later is ABORTED.
    void check_failed_locked(uint64_t gen) const
    {
        if (failed_code == ACCEL_OK) return;
        if (gen == failed_generation) fail(failed_code, failed_message);
        fail(ACCEL_ERR_ABORTED, "thread group: an earlier operation failed: " + failed_message);
    }
    void abort(const std::string &message)
    {
        std::vector<std::shared_ptr<World>> kids;
        {
            std::lock_guard<std::mutex> lock(m);
            if (failed_code == ACCEL_OK) {
                failed_code = ACCEL_ERR_ABORTED;
                failed_message = message;
                failed_generation = generation;
            }
            cv.notify_all();
            for (auto &w : children)
                if (auto k = w.lock()) kids.push_back(k);
        }
        for (auto &k : kids) k->abort(message);
    }

    // One collective: `rank` deposits `d`; the last rank checks that all made the same call and runs
    // `combine` on the full round; everyone returns that round.
    std::shared_ptr<Round> exchange(int32_t rank, Deposit d, const std::function<void(Round &)> &combine)
    {
        std::unique_lock<std::mutex> lock(m);
        check_failed_locked(generation + 1); // a poisoned group: ABORTED
        std::shared_ptr<Round> mine = current;
        const uint64_t gen = generation;
        mine->in[static_cast<size_t>(rank)] = std::move(d);
        here[static_cast<size_t>(rank)] = true;
        if (++arrived == size) {
            for (int32_t r = 1; r < size; ++r)
                if (mine->in[static_cast<size_t>(r)].call != mine->in[0].call)
                    poison_locked(ACCEL_ERR_FAILED_PRECONDITION,
                                  "mismatched collectives: rank 0 called " + mine->in[0].call + ", rank " +
                                      std::to_string(r) + " called " + mine->in[static_cast<size_t>(r)].call);
            try {
                combine(*mine);
            } catch (const std::exception &e) {
                poison_locked(ACCEL_ERR_INVALID_ARGUMENT, std::string("thread group: ") + e.what());
            }
            current = std::make_shared<Round>(size);
            arrived = 0;
            here.assign(here.size(), false);
            ++generation;
            cv.notify_all();
            return mine;
        }
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        while (generation == gen && failed_code == ACCEL_OK) {
            if (cv.wait_until(lock, deadline) == std::cv_status::timeout && generation == gen && failed_code == ACCEL_OK) {
                std::string missing;
                for (int32_t r = 0; r < size; ++r)
                    if (!here[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
                poison_locked(ACCEL_ERR_DEADLINE_EXCEEDED,
                              mine->in[static_cast<size_t>(rank)].call + ": rank(s) " + missing + " did not arrive within " +
                                  std::to_string(timeout.count()) + " ms");
            }
        }
        if (generation == gen) check_failed_locked(gen);
        return mine;
    }
};

class DoneWork : public Work {
public:
    void wait() override {}
    double completed_at() const override { return at_; }

private:
    double at_ = now_seconds();
};

class ThreadCommunicator : public Communicator {
public:
    ThreadCommunicator(std::shared_ptr<World> world, int32_t rank) : world_(std::move(world)), rank_(rank) {}

    const char *backend() const override { return "threads"; }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return world_->size; }
    std::chrono::milliseconds timeout() const override { return world_->timeout; }
    void abort(const std::string &why) { world_->abort(why); }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        need(tensor, "allreduce");
        auto round = world_->exchange(rank_, {std::string("allreduce(") + reduce_op_name(op) + ") " + describe(tensor), tensor.clone()},
                                      [op](Round &r) { r.result = reduce(r.in, op); });
        tensor.copy_(round->result);
        return std::make_shared<DoneWork>();
    }
    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        need(tensor, "allgather");
        auto round = world_->exchange(rank_, {"allgather " + describe(tensor), tensor.clone()}, [](Round &) {});
        std::vector<at::Tensor> out;
        for (const auto &d : round->in) out.push_back(d.tensor.clone()); // each rank its own copies
        return out;
    }
    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        need(tensor, "broadcast");
        check_rank(root, "broadcast: root");
        const bool is_root = root == rank_;
        auto round = world_->exchange(rank_, {"broadcast(root " + std::to_string(root) + ") " + describe(tensor),
                                              is_root ? tensor.clone() : at::Tensor()},
                                      [](Round &) {});
        if (!is_root) tensor.copy_(round->in[static_cast<size_t>(root)].tensor);
    }
    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) override
    {
        need(input, "reduce_scatter");
        if (input.dim() == 0 || input.size(0) % size() != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "reduce_scatter: input " + describe(input) + " does not split into " +
                                                 std::to_string(size()) + " equal chunks along dim 0");
        auto round = world_->exchange(rank_, {std::string("reduce_scatter(") + reduce_op_name(op) + ") " + describe(input), input.clone()},
                                      [op](Round &r) { r.result = reduce(r.in, op); });
        return round->result.chunk(size(), 0)[static_cast<size_t>(rank_)].clone();
    }
    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        need(tensor, "send");
        check_rank(dst, "send: dst");
        if (dst == rank_) fail(ACCEL_ERR_FAILED_PRECONDITION, "send: a rank cannot send to itself");
        std::lock_guard<std::mutex> lock(world_->m);
        world_->check_failed_locked(world_->generation + 1);
        world_->mailbox[{rank_, dst, tag}].push_back(tensor.clone());
        world_->cv.notify_all();
    }
    bool send_async_blocks() const override { return false; } // a send is a copy into the receiver's mailbox
    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        need(tensor, "recv");
        check_rank(src, "recv: src");
        if (src == rank_) fail(ACCEL_ERR_FAILED_PRECONDITION, "recv: a rank cannot receive from itself");
        World &w = *world_;
        std::unique_lock<std::mutex> lock(w.m);
        auto &queue = w.mailbox[{src, rank_, tag}];
        const auto deadline = std::chrono::steady_clock::now() + w.timeout;
        while (queue.empty()) {
            w.check_failed_locked(w.generation + 1);
            if (w.cv.wait_until(lock, deadline) == std::cv_status::timeout && queue.empty())
                w.poison_locked(ACCEL_ERR_DEADLINE_EXCEEDED, "recv: nothing from rank " + std::to_string(src) + " with tag " +
                                                                 std::to_string(tag) + " within " +
                                                                 std::to_string(w.timeout.count()) + " ms");
        }
        at::Tensor got = queue.front();
        queue.pop_front();
        if (got.sizes() != tensor.sizes() || got.scalar_type() != tensor.scalar_type())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "recv: rank " + std::to_string(src) + " sent " + describe(got) +
                                                 ", the receiving tensor is " + describe(tensor));
        tensor.copy_(got);
    }
    void barrier() override { world_->exchange(rank_, {"barrier", at::Tensor()}, [](Round &) {}); }
    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        std::string list;
        for (size_t i = 0; i < ranks.size(); ++i) {
            check_rank(ranks[i], "new_group: ranks");
            if (i > 0 && ranks[i] <= ranks[i - 1])
                fail(ACCEL_ERR_INVALID_ARGUMENT, "new_group: ranks must be sorted and unique, got " + list + "," +
                                                     std::to_string(ranks[i]) + "...");
            list += (i ? "," : "") + std::to_string(ranks[i]);
        }
        if (ranks.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "new_group: ranks is empty");
        const std::shared_ptr<World> parent = world_;
        const std::chrono::milliseconds t = world_->timeout;
        const int32_t n = static_cast<int32_t>(ranks.size());
        auto round = world_->exchange(rank_, {"new_group([" + list + "])", at::Tensor()}, [n, t](Round &r) {
            r.group = std::make_shared<World>(n, t);
        });
        {
            std::lock_guard<std::mutex> lock(parent->m); // (every member adds it; duplicates are harmless)
            parent->children.push_back(round->group);
        }
        for (int32_t i = 0; i < n; ++i)
            if (ranks[static_cast<size_t>(i)] == rank_) return std::make_shared<ThreadCommunicator>(round->group, i);
        return nullptr;
    }

private:
    std::shared_ptr<World> world_;
    int32_t rank_;

    static void need(const at::Tensor &t, const char *op)
    {
        if (!t.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": undefined tensor");
    }
    void check_rank(int32_t r, const char *what) const
    {
        if (r < 0 || r >= size())
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) + " does not exist in a group of " +
                                             std::to_string(size()));
    }
};

std::vector<std::shared_ptr<ThreadCommunicator>> make_ranks(int32_t size, std::chrono::milliseconds timeout)
{
    if (size < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "thread group: size must be at least 1, got " + std::to_string(size));
    if (timeout.count() <= 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "thread group: timeout must be positive");
    auto world = std::make_shared<World>(size, timeout);
    std::vector<std::shared_ptr<ThreadCommunicator>> out;
    for (int32_t r = 0; r < size; ++r) out.push_back(std::make_shared<ThreadCommunicator>(world, r));
    return out;
}

} // namespace

std::vector<std::shared_ptr<Communicator>> make_thread_communicators(int32_t size, std::chrono::milliseconds timeout)
{
    auto ranks = make_ranks(size, timeout);
    return {ranks.begin(), ranks.end()};
}

void run_on_threads(int32_t size, const std::function<void(const std::shared_ptr<Communicator> &)> &fn,
                    std::chrono::milliseconds timeout)
{
    auto ranks = make_ranks(size, timeout);
    std::mutex m;
    std::exception_ptr first;
    std::vector<std::thread> threads;
    for (int32_t r = 0; r < size; ++r)
        threads.emplace_back([&, r] {
            try {
                fn(ranks[static_cast<size_t>(r)]);
            } catch (const std::exception &e) {
                {
                    std::lock_guard<std::mutex> lock(m);
                    if (!first) first = std::current_exception();
                }
                // Recorded before the abort: a rank failing because of it cannot be first.
                ranks[static_cast<size_t>(r)]->abort("rank " + std::to_string(r) + " failed: " + e.what());
            } catch (...) {
                {
                    std::lock_guard<std::mutex> lock(m);
                    if (!first) first = std::current_exception();
                }
                ranks[static_cast<size_t>(r)]->abort("rank " + std::to_string(r) + " failed");
            }
        });
    for (auto &t : threads) t.join();
    if (first) std::rethrow_exception(first);
}

} // namespace accel::distributed
